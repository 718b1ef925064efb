-- Chats by owning replica: a replica's shutdown lists the chats it owns, and
-- replica pruning checks that a dead replica owns none. Only owned chats are
-- indexed (most chats are idle, with no worker).
CREATE INDEX chats_worker_idx ON chats (worker_id) WHERE worker_id IS NOT NULL;
