-- Tool approval (issue 16; API.md "Tool approval (human in the loop)";
-- DESIGN.md "Approvals reuse requires_action").
--
-- Which tools of an MCP server a person must approve before a call runs:
-- the JSON string "never" (the default: nothing needs approval) or
-- "always", or a JSON array of the server's own tool names (without the
-- `<slug>__` prefix). The decisions themselves are rows in chat history
-- (`tool-approval` parts), not columns.
ALTER TABLE chat_mcp_servers ADD COLUMN require_approval jsonb NOT NULL DEFAULT '"never"'::jsonb
    CHECK (require_approval IN ('"never"'::jsonb, '"always"'::jsonb)
           OR jsonb_typeof(require_approval) = 'array');
