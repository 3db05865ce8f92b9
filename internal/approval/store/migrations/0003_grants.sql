-- Several approvers per request (a two-person rule for risky plans): a request needs approvals_required
-- distinct approvers, and each approver's signed token is one row of grants. The tokens move out of requests,
-- which keeps the decision (who denied, or whose grant completed the set, and when) and, once granted, the
-- earliest expiry among its grants' tokens: the grant as a whole expires with its first token.
--
-- SQLite cannot drop columns that a CHECK constraint names, so requests is rebuilt. Its grants, at most one
-- per request until now, are copied first.
CREATE TABLE requests_v3 (
    id                 TEXT    PRIMARY KEY,
    tool               TEXT    NOT NULL,
    params             TEXT    NOT NULL, -- CanonicalParams
    params_hash        TEXT    NOT NULL, -- ParamsHash(tool, params)
    namespace          TEXT    NOT NULL DEFAULT '',
    plan_digest        TEXT    NOT NULL DEFAULT '',
    plan_summary       TEXT    NOT NULL DEFAULT '',
    signals            TEXT    NOT NULL DEFAULT '[]', -- JSON array of {"name","match"}
    created_at         INTEGER NOT NULL,
    expires_at         INTEGER NOT NULL,
    status             TEXT    NOT NULL DEFAULT 'pending'
                       CHECK (status IN ('pending', 'granted', 'denied', 'consumed')),
    approvals_required INTEGER NOT NULL DEFAULT 1 CHECK (approvals_required >= 1),
    approver           TEXT    NOT NULL DEFAULT '', -- who denied, or the approver whose grant completed the set
    decided_at         INTEGER NOT NULL DEFAULT 0,
    reason             TEXT    NOT NULL DEFAULT '',
    token_expiry       INTEGER NOT NULL DEFAULT 0,  -- once granted: the earliest token expiry of its grants
    consumed_at        INTEGER NOT NULL DEFAULT 0,
    CHECK ((status IN ('granted', 'consumed')) = (token_expiry > 0))
);

INSERT INTO requests_v3 (id, tool, params, params_hash, namespace, plan_digest, plan_summary, signals,
                         created_at, expires_at, status, approvals_required, approver, decided_at, reason,
                         token_expiry, consumed_at)
SELECT id, tool, params, params_hash, namespace, plan_digest, plan_summary, signals,
       created_at, expires_at, status, 1, approver, decided_at, reason, token_expiry, consumed_at
FROM requests;

-- One approver's approval of one request. An approver approves a request once (the primary key); a token
-- approves one request (token_id is unique).
CREATE TABLE grants (
    request_id   TEXT    NOT NULL REFERENCES requests_v3 (id),
    approver     TEXT    NOT NULL, -- the approver's key ID: the token's kid and iss
    token        TEXT    NOT NULL, -- the signed approval; only Store.Consume returns it
    token_id     TEXT    NOT NULL UNIQUE,
    token_expiry INTEGER NOT NULL,
    decided_at   INTEGER NOT NULL,
    PRIMARY KEY (request_id, approver)
);

INSERT INTO grants (request_id, approver, token, token_id, token_expiry, decided_at)
SELECT id, approver, token, token_id, token_expiry, decided_at FROM requests WHERE token <> '';

DROP TABLE requests;
-- Renaming also renames the table that grants.request_id references.
ALTER TABLE requests_v3 RENAME TO requests;

CREATE INDEX requests_by_call ON requests (tool, params_hash, status, created_at);
CREATE INDEX requests_by_created ON requests (created_at);
