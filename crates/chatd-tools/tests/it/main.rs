//! Integration tests of chatd-tools that need no MCP fixture: the chat
//! workspace's sandbox, file tools and manifest (`workspace`).

mod workspace;
