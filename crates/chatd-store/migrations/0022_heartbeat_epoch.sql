-- Heartbeats after a failover or a crash (issue 36). `chat_heartbeats` is
-- UNLOGGED (spec "Heartbeat loop"): PostgreSQL empties it when it recovers
-- from a crash, and a promoted standby never had its rows. Read as it is, an
-- empty table says that no runner holds any chat, and every replica would
-- take every running chat over at once, cutting generations that are alive
-- and well on replicas that only lost their database connection for a few
-- seconds.
--
-- chat_heartbeats_epoch: one row, UNLOGGED too, so that it is lost exactly
-- when the heartbeats are. Its row is inserted here (a new database has
-- all of its heartbeats: none). When an acquisition pass finds it missing,
-- it inserts it again and, in the same statement, gives every chat a runner
-- holds a heartbeat as of that moment
-- (`chatd_store::heartbeats::recover_lost`): a live runner refreshes it
-- within its heartbeat interval, and the chats of a runner that died with
-- the database are taken over one lease later, as after any crash.
CREATE UNLOGGED TABLE chat_heartbeats_epoch (
    id boolean PRIMARY KEY DEFAULT true CHECK (id),
    started_at timestamp with time zone NOT NULL DEFAULT now()
);
INSERT INTO chat_heartbeats_epoch DEFAULT VALUES;
