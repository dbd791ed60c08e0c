"""The raw-span scanner cuts ``params.arguments`` out of a JSON-RPC body byte for byte."""
from __future__ import annotations

import json

import pytest

from toolops.model_io.jsonrpc_raw import RawJSONError, member_bytes

ARGS = ("params", "arguments")


def test_it_returns_the_exact_bytes_with_their_whitespace_and_key_order():
    body = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x","arguments":{ "b" :1,\n"a": [1, {"c":"}"}] }}}'
    assert member_bytes(body, ARGS) == b'{ "b" :1,\n"a": [1, {"c":"}"}] }'


def test_it_keeps_duplicate_keys_inside_arguments():
    body = b'{"id":1,"params":{"arguments":{"city":"Paris","city":"Rome"},"name":"w"},"method":"tools/call"}'
    assert member_bytes(body, ARGS) == b'{"city":"Paris","city":"Rome"}'


def test_it_compares_member_names_after_unescaping():
    body = b'{"\\u0070arams":{"arguments":{"k":"\\"quoted\\" \\\\"}}}'
    assert member_bytes(body, ARGS) == b'{"k":"\\"quoted\\" \\\\"}'


def test_it_takes_the_last_of_a_repeated_envelope_member_like_the_sdk_parser():
    body = b'{"params":{"arguments":{"a":1}},"params":{"arguments":{"a":2}}}'
    assert member_bytes(body, ARGS) == b'{"a":2}'
    assert json.loads(body)["params"]["arguments"] == {"a": 2}


def test_it_answers_none_when_arguments_are_absent_or_params_is_not_an_object():
    assert member_bytes(b'{"params":{"name":"x"}}', ARGS) is None
    assert member_bytes(b'{"params":[1,2]}', ARGS) is None
    assert member_bytes(b'{"params":{}}', ARGS) is None


def test_it_finds_scalar_and_string_values():
    assert member_bytes(b'{"params":{"arguments":-1.5e3}}', ARGS) == b"-1.5e3"
    assert member_bytes(b'{"params":{"arguments":"{\\"a\\":1}"}}', ARGS) == b'"{\\"a\\":1}"'


def test_it_refuses_a_body_that_is_not_json():
    with pytest.raises(RawJSONError):
        member_bytes(b'{"params":{"arguments":{"a":1}', ARGS)


def test_it_follows_array_indexes_to_an_anthropic_tool_use_input():
    body = b'{"content":[{"type":"text","text":"[\\"]"}, {"type":"tool_use","input":{ "a" : [1,{"b":2}] }}]}'
    assert member_bytes(body, ("content", 1, "input")) == b'{ "a" : [1,{"b":2}] }'
    assert member_bytes(b'[ {"input":{}} , {"input":[]} ]', (1, "input")) == b"[]"


def test_it_answers_none_for_an_index_past_the_end_or_on_an_object():
    assert member_bytes(b'{"content":[{"input":{}}]}', ("content", 1, "input")) is None
    assert member_bytes(b'{"content":[]}', ("content", 0)) is None
    assert member_bytes(b'{"content":{"0":1}}', ("content", 0)) is None
