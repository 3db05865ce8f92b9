-- Approval requests: one row per tool call that waits for a person. Times are Unix nanoseconds (0 = unset).
-- The status column holds the decided state; "expired" is never stored but computed when a pending request
-- is read past expires_at or a granted one past token_expiry.
CREATE TABLE requests (
    id           TEXT    PRIMARY KEY,
    tool         TEXT    NOT NULL,
    params       TEXT    NOT NULL, -- CanonicalParams
    params_hash  TEXT    NOT NULL, -- ParamsHash(tool, params)
    namespace    TEXT    NOT NULL DEFAULT '',
    plan_digest  TEXT    NOT NULL DEFAULT '',
    plan_summary TEXT    NOT NULL DEFAULT '',
    signals      TEXT    NOT NULL DEFAULT '[]', -- JSON array of {"name","match"}
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    status       TEXT    NOT NULL DEFAULT 'pending'
                 CHECK (status IN ('pending', 'granted', 'denied', 'consumed')),
    approver     TEXT    NOT NULL DEFAULT '',
    decided_at   INTEGER NOT NULL DEFAULT 0,
    reason       TEXT    NOT NULL DEFAULT '',
    token        TEXT    NOT NULL DEFAULT '', -- the signed approval; only Consume returns it
    token_id     TEXT    NOT NULL DEFAULT '',
    token_expiry INTEGER NOT NULL DEFAULT 0,
    consumed_at  INTEGER NOT NULL DEFAULT 0,
    CHECK ((status IN ('granted', 'consumed')) = (token <> ''))
);

CREATE INDEX requests_by_call ON requests (tool, params_hash, status, created_at);
CREATE INDEX requests_by_created ON requests (created_at);
CREATE UNIQUE INDEX requests_by_token_id ON requests (token_id) WHERE token_id <> '';
