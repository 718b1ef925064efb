"""OpenAI's official Python SDK against a live chatd (scripts/compat-test.sh).

API.md "Compatible protocols" and "Pinned details of the compatible
protocols": /v1 models, responses (plain, streamed, background, cancelled,
continued, branched), conversations and their items, function tools, errors,
and a stream resumed on the other replica after the replica that ran the
turn was killed with SIGKILL (last: it kills a replica).

Environment (set by the script): CHATD_URL_A, CHATD_URL_B (two replicas on
one database), CHATD_TOKEN (the bootstrap admin token), CHATD_PID_A,
CHATD_PID_B (their processes). The fake LLM runs in scripted mode: it answers
`echo: <last user text>` with usage 10/5, `call NAME JSON` with a call of
tool NAME (id `call_fake_<n>`), a tool result with `tool said: <result>`, and
streams text containing `slow` over several seconds.
"""

import json
import os
import signal
import time
import urllib.error
import urllib.request
import uuid

import openai
import pytest

URL_A = os.environ["CHATD_URL_A"]
URL_B = os.environ["CHATD_URL_B"]
TOKEN = os.environ["CHATD_TOKEN"]
PIDS = {URL_A: int(os.environ["CHATD_PID_A"]), URL_B: int(os.environ["CHATD_PID_B"])}
MODEL = "fake-model"

WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def client(url=URL_A, token=TOKEN):
    # No retries: a retried 5xx or 409 would hide what the server answered.
    return openai.OpenAI(base_url=f"{url}/v1", api_key=token, timeout=60, max_retries=0)


def native(method, path, body=None, url=URL_A, token=TOKEN):
    """chatd's own API: (status, parsed JSON body or None)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{url}{path}", data=data, method=method)
    req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
            return resp.status, (json.loads(raw) if raw else None)
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, raw.decode(errors="replace")


def chat_id_of(conversation_id):
    assert conversation_id.startswith("conv_"), conversation_id
    chat_id = conversation_id[len("conv_"):]
    uuid.UUID(chat_id)  # conv_<chat id>
    return chat_id


def item_text(item):
    return "".join(getattr(c, "text", "") or "" for c in (item.content or []))


def wait_for(predicate, timeout, what, interval=0.2):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def event_json(event):
    return json.dumps(event.to_dict(), sort_keys=True)


# ---- models and plain responses ---------------------------------------------


def test_models_list_has_the_fake_model():
    ids = [m.id for m in client().models.list()]
    assert MODEL in ids, ids
    assert len(ids) == len(set(ids)), f"a model listed twice: {ids}"


def test_create_non_streaming():
    r = client().responses.create(model=MODEL, input="hello")
    assert r.id.startswith("resp_"), r.id
    assert r.status == "completed", r
    assert r.output_text == "echo: hello"
    assert r.usage is not None
    assert r.usage.input_tokens == 10, r.usage
    assert r.usage.output_tokens == 5, r.usage
    assert r.conversation is not None and r.conversation.id.startswith("conv_"), r.conversation
    # The same chat through chatd's own API (and from the other replica).
    status, chat = native("GET", f"/api/v2/chats/{chat_id_of(r.conversation.id)}", url=URL_B)
    assert status == 200, chat
    # The response is durable: the other replica reads it.
    again = client(URL_B).responses.retrieve(r.id)
    assert again.status == "completed" and again.output_text == "echo: hello"


def test_create_streaming():
    stream = client().responses.create(model=MODEL, input="hello stream", stream=True)
    events = list(stream)
    types = [e.type for e in events]
    for t in ("response.created", "response.output_text.delta", "response.completed"):
        assert t in types, types
    assert types[0] == "response.created", types
    assert types[-1] == "response.completed", types
    seqs = [e.sequence_number for e in events]
    assert all(a < b for a, b in zip(seqs, seqs[1:])), f"sequence numbers not increasing: {seqs}"
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert final.status == "completed"
    assert deltas == final.output_text == "echo: hello stream"
    assert final.conversation.id.startswith("conv_")


# ---- conversations -----------------------------------------------------------


def test_conversations_items_continue_and_branch():
    c = client()
    conv = c.conversations.create()
    assert conv.id.startswith("conv_"), conv.id
    # Creating a conversation runs nothing: the chat is idle.
    status, chat = native("GET", f"/api/v2/chats/{chat_id_of(conv.id)}")
    assert status == 200 and chat["status"] == "waiting", chat

    r1 = c.responses.create(model=MODEL, input="first", conversation=conv.id)
    assert r1.output_text == "echo: first" and r1.conversation.id == conv.id
    r2 = c.responses.create(model=MODEL, input="second", conversation=conv.id)
    assert r2.output_text == "echo: second" and r2.conversation.id == conv.id

    expected = [("user", "first"), ("assistant", "echo: first"),
                ("user", "second"), ("assistant", "echo: second")]
    items = list(c.conversations.items.list(conv.id, order="asc"))
    got = [(i.role, item_text(i)) for i in items if i.type == "message"]
    assert got == expected, got
    # OpenAI's default order is desc.
    items_default = list(c.conversations.items.list(conv.id))
    got_default = [(i.role, item_text(i)) for i in items_default if i.type == "message"]
    assert got_default == expected[::-1], got_default

    # previous_response_id (the latest): the same conversation goes on.
    r3 = c.responses.create(model=MODEL, input="third", previous_response_id=r2.id)
    assert r3.output_text == "echo: third"
    assert r3.conversation.id == conv.id

    # An older previous_response_id: a new branch of the same chat after r1.
    r4 = c.responses.create(model=MODEL, input="branch", previous_response_id=r1.id)
    assert r4.output_text == "echo: branch"
    assert r4.conversation.id == conv.id
    items = list(c.conversations.items.list(conv.id, order="asc"))
    got = [(i.role, item_text(i)) for i in items if i.type == "message"]
    assert got == [("user", "first"), ("assistant", "echo: first"),
                   ("user", "branch"), ("assistant", "echo: branch")], got
    # The model was sent r1's history only (the native view of the branch).
    status, page = native("GET", f"/api/v2/chats/{chat_id_of(conv.id)}/messages")
    assert status == 200, page
    texts = [p.get("text") for m in page["messages"] for p in m["content"] if p["type"] == "text"]
    assert texts == ["first", "echo: first", "branch", "echo: branch"], texts


def test_conversation_items_added_run_nothing_and_delete():
    c = client()
    conv = c.conversations.create(items=[{"type": "message", "role": "user", "content": "seed"}])
    chat_id = chat_id_of(conv.id)
    added = c.conversations.items.create(
        conv.id, items=[{"type": "message", "role": "user", "content": "more context"}])
    assert len(added.data) == 1, added
    # Neither ran the model: the chat is idle and holds the two user items.
    status, chat = native("GET", f"/api/v2/chats/{chat_id}")
    assert status == 200 and chat["status"] == "waiting", chat
    items = list(c.conversations.items.list(conv.id, order="asc"))
    assert [(i.role, item_text(i)) for i in items] == [("user", "seed"), ("user", "more context")]
    # A response in it answers its own input (the fake echoes the last user text).
    r = c.responses.create(model=MODEL, input="now answer", conversation=conv.id)
    assert r.output_text == "echo: now answer"
    assert client(URL_B).conversations.retrieve(conv.id).id == conv.id
    deleted = c.conversations.delete(conv.id)
    assert deleted.deleted is True and deleted.id == conv.id, deleted
    with pytest.raises(openai.NotFoundError):
        c.conversations.retrieve(conv.id)


def test_instructions_max_output_tokens_reasoning_metadata_accepted():
    r = client().responses.create(
        model=MODEL,
        input="options",
        instructions="Answer in one short sentence.",
        max_output_tokens=16,
        reasoning={"effort": "low"},
        metadata={"suite": "compat"},
    )
    assert r.status == "completed", r
    assert r.output_text == "echo: options"


# ---- function tools ----------------------------------------------------------


def test_function_call_and_output():
    c = client()
    r = c.responses.create(model=MODEL, input='call get_weather {"city":"Paris"}', tools=[WEATHER_TOOL])
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1, r.output
    call = calls[0]
    assert call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris"}
    assert call.call_id.startswith("call_fake_"), call.call_id
    assert r.status == "completed", r.status

    r2 = c.responses.create(
        model=MODEL,
        previous_response_id=r.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
        tools=[WEATHER_TOOL],
    )
    assert r2.status == "completed", r2
    assert r2.output_text == "tool said: sunny"
    assert r2.conversation.id == r.conversation.id


def test_function_call_streamed():
    events = list(client().responses.create(
        model=MODEL, input='call get_weather {"city":"Lyon"}', tools=[WEATHER_TOOL], stream=True))
    types = [e.type for e in events]
    assert types[-1] == "response.completed", types
    done = [e.item for e in events if e.type == "response.output_item.done" and e.item.type == "function_call"]
    assert len(done) == 1, types
    assert done[0].name == "get_weather" and json.loads(done[0].arguments) == {"city": "Lyon"}
    args_deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    if args_deltas:
        assert json.loads(args_deltas) == {"city": "Lyon"}, args_deltas
    final = events[-1].response
    assert [o.type for o in final.output] == ["function_call"], final.output


# ---- provider-hosted web search ----------------------------------------------

# scripts/compat-test.sh's model config of Anthropic kind with
# options.provider_tools ["web_search"]; the fake LLM answers `search <query>`
# with "Searching. ", a search and "Found <query>." citing its one result.
SEARCH_MODEL = "fake-search-model"


def test_web_search_is_a_web_search_call_and_citations_url_citations():
    r = client().responses.create(model=SEARCH_MODEL, input="search claude shannon")
    assert r.status == "completed", r
    assert [i.type for i in r.output] == ["web_search_call", "message"], r.output
    search, message = r.output
    assert isinstance(search, openai.types.responses.ResponseFunctionWebSearch), search
    assert search.status == "completed"
    assert search.action.type == "search"
    assert search.action.query == "claude shannon"
    assert search.id.startswith("ws_"), search.id
    assert message.id.startswith("msg_"), message.id
    part = message.content[0]
    assert part.text == "Searching. Found claude shannon."
    assert r.output_text == part.text
    assert len(part.annotations) == 1, part.annotations
    citation = part.annotations[0]
    assert citation.type == "url_citation"
    assert citation.url.startswith("https://example.org/search/"), citation.url
    assert citation.title == "About claude shannon"
    assert (citation.start_index, citation.end_index) == (11, 32)
    assert part.text[citation.start_index : citation.end_index] == "Found claude shannon."

    # The conversation's items: the user's message, the search, the answer.
    items = client().conversations.items.list(r.conversation.id, order="asc").data
    assert [i.type for i in items] == ["message", "web_search_call", "message"], items
    assert items[1].id == search.id
    assert items[1].status == "completed"
    assert items[1].action.query == "claude shannon"
    assert items[2].id == message.id
    assert items[2].content[0].annotations[0].url == citation.url
    assert items[2].content[0].annotations[0].start_index == 11


# ---- background and cancel ---------------------------------------------------


def test_background_then_poll():
    c = client()
    t0 = time.monotonic()
    r = c.responses.create(model=MODEL, input="background slow one", background=True)
    elapsed = time.monotonic() - t0
    assert r.status in ("queued", "in_progress"), r.status
    assert elapsed < 3, f"a background create took {elapsed:.1f} s"
    done = wait_for(
        lambda: (lambda x: x if x.status not in ("queued", "in_progress") else None)(c.responses.retrieve(r.id)),
        40, "the background response to finish", interval=0.3)
    assert done.status == "completed", done
    assert done.output_text == "echo: background slow one"


def test_background_cancel_keeps_the_partial_answer():
    c = client()
    answer = "echo: cancel me slow"
    r = c.responses.create(model=MODEL, input="cancel me slow", background=True)
    wait_for(lambda: c.responses.retrieve(r.id).status == "in_progress", 20, "in_progress")
    time.sleep(2.0)  # a few parts of the answer (one every 0.3 s)
    cancelled = c.responses.cancel(r.id)
    assert cancelled.status == "cancelled", cancelled
    partial = cancelled.output_text
    assert partial and answer.startswith(partial) and partial != answer, repr(partial)
    again = client(URL_B).responses.retrieve(r.id)
    assert again.status == "cancelled" and again.output_text == partial


# ---- errors ------------------------------------------------------------------


def test_unknown_model_is_400():
    with pytest.raises(openai.BadRequestError) as e:
        client().responses.create(model="no-such-model", input="hello")
    assert e.value.status_code == 400
    body = e.value.body
    assert isinstance(body, dict), body
    assert {"message", "type", "param", "code"} <= set(body), body
    assert body.get("param") == "model" or body.get("type") == "invalid_request_error", body


def test_hosted_tool_is_400():
    with pytest.raises(openai.BadRequestError) as e:
        client().responses.create(model=MODEL, input="search", tools=[{"type": "web_search"}])
    assert e.value.status_code == 400


def test_bad_token_is_401():
    with pytest.raises(openai.AuthenticationError):
        client(token="not-a-token").models.list()


def test_another_users_response_and_conversation_are_404():
    owner = client()
    r = owner.responses.create(model=MODEL, input="mine")
    name = f"compat-{uuid.uuid4().hex[:10]}"
    status, user = native("POST", "/api/v2/users", {"username": name, "role": "member"})
    assert status == 201, user
    status, tok = native("POST", f"/api/v2/users/{user['id']}/tokens", {"name": "compat"})
    assert status == 201, tok
    other = client(URL_B, tok["token"])
    with pytest.raises(openai.NotFoundError):
        other.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        other.conversations.retrieve(r.conversation.id)
    with pytest.raises(openai.NotFoundError):
        other.responses.create(model=MODEL, input="theirs", previous_response_id=r.id)
    with pytest.raises(openai.NotFoundError):
        other.responses.create(model=MODEL, input="theirs", conversation=r.conversation.id)
    # The member's own work is fine.
    mine = other.responses.create(model=MODEL, input="member")
    assert mine.output_text == "echo: member"


# ---- resume on the other replica after SIGKILL (last: kills a replica) -------


def owner_url(chat_id):
    status, chat = native("GET", f"/api/v2/chats/{chat_id}", url=URL_B)
    assert status == 200, chat
    if not chat.get("worker_id"):
        return None
    status, replicas = native("GET", "/api/v2/replicas", url=URL_B)
    assert status == 200, replicas
    for r in replicas:
        if r["id"] == chat["worker_id"]:
            return r["advertise_url"].rstrip("/")
    return None


def test_zz_resume_on_the_other_replica_after_kill9():
    answer = "echo: resume this slow story"
    seen = {}  # sequence_number -> event JSON, across every stream

    def record(event, where):
        j = event_json(event)
        prev = seen.get(event.sequence_number)
        assert prev is None or prev == j, (
            f"sequence number {event.sequence_number} twice with different content "
            f"({where}):\n{prev}\n{j}")
        seen[event.sequence_number] = j

    events_first = []
    stream = client(URL_A).responses.create(model=MODEL, input="resume this slow story",
                                            background=True, stream=True)
    resp_id = chat_id = None
    deltas = 0
    for event in stream:
        record(event, "first stream")
        events_first.append(event)
        if event.type == "response.created":
            resp_id = event.response.id
            chat_id = chat_id_of(event.response.conversation.id)
        if event.type == "response.output_text.delta":
            deltas += 1
            if deltas >= 3:
                break
        assert event.type != "response.completed", "the answer finished before the kill"
    stream.close()
    assert resp_id and deltas >= 3, [e.type for e in events_first]
    n = events_first[-1].sequence_number

    # Kill the replica that runs the turn; resume on the other one.
    owner = wait_for(lambda: owner_url(chat_id), 10, "the chat's owner")
    assert owner in PIDS, f"owner {owner} is neither {URL_A} nor {URL_B}"
    survivor = URL_B if owner == URL_A else URL_A
    os.kill(PIDS[owner], signal.SIGKILL)
    print(f"\nresume: streamed from {URL_A}, killed the owner {owner}, resuming on {survivor} after {n}")

    events_second = []
    resumed = client(survivor).responses.retrieve(resp_id, stream=True, starting_after=n)
    for event in resumed:
        record(event, "resumed stream")
        events_second.append(event)
        if event.type in ("response.completed", "response.failed", "response.incomplete"):
            break
    resumed.close()
    types = [e.type for e in events_second]
    assert types and types[-1] == "response.completed", types
    assert all(e.sequence_number > n for e in events_second), \
        f"starting_after={n} but got {[e.sequence_number for e in events_second]}"
    seqs = [e.sequence_number for e in events_second]
    assert all(a < b for a, b in zip(seqs, seqs[1:])), f"sequence numbers not increasing: {seqs}"

    committed = client(survivor).responses.retrieve(resp_id)
    assert committed.status == "completed", committed
    assert committed.output_text == answer
    final = events_second[-1].response
    assert final.output_text == committed.output_text, (final.output_text, committed.output_text)

    # What a client built from both streams: the text of every item that got
    # deltas, and each item's fate (an attempt discarded after it streamed
    # ends as an incomplete item). The completed message items hold exactly
    # the committed answer.
    texts, fate, order = {}, {}, []
    for e in events_first + events_second:
        if e.type == "response.output_text.delta":
            if e.item_id not in texts:
                texts[e.item_id] = ""
                order.append(e.item_id)
            texts[e.item_id] += e.delta
        elif e.type == "response.output_item.done":
            fate[e.item.id] = (e.item.type, e.item.status)
    undecided = [i for i in order if i not in fate]
    assert not undecided, f"items streamed but never done: {undecided} ({types})"
    kept = "".join(texts[i] for i in order if fate[i] == ("message", "completed"))
    print(f"resume: items {[(i, fate[i][1], texts[i]) for i in order]}")
    print(f"resume: resumed stream {[(e.sequence_number, e.type) for e in events_second]}")
    assert kept == answer, (kept, {i: (texts[i], fate[i]) for i in order})

    # A replay of the whole stream (no starting_after) repeats no sequence
    # number with other text.
    replay = client(survivor).responses.retrieve(resp_id, stream=True)
    texty = ("response.output_text.delta", "response.output_text.done")
    before = {}
    for e in events_first + events_second:
        if e.type in texty:
            before[e.sequence_number] = (e.type, e.item_id, getattr(e, "delta", None), getattr(e, "text", None))
    for e in replay:
        if e.type in texty and e.sequence_number in before:
            now = (e.type, e.item_id, getattr(e, "delta", None), getattr(e, "text", None))
            assert before[e.sequence_number] == now, (e.sequence_number, before[e.sequence_number], now)
        if e.type in ("response.completed", "response.failed", "response.incomplete"):
            break
    replay.close()
