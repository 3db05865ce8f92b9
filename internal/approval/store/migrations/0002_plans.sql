-- Saved plans the MCP server made, with the description it files with an approval request for one. Kept
-- here, not in the server's memory, so that a server restarted between plan and apply still describes the
-- plan. The description is the server's claim: `agent-sandbox approve` computes its own from the saved plan.
CREATE TABLE plans (
    plan_id     TEXT    PRIMARY KEY,
    workspace   TEXT    NOT NULL,
    description TEXT    NOT NULL,
    signals     TEXT    NOT NULL DEFAULT '[]', -- JSON array of {"name","match"}
    created_at  INTEGER NOT NULL
);
