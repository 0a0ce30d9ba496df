"""The vLLM parser's exact per-request counts: token-id lists, response bodies, and the integral they replace."""

from __future__ import annotations

import ast

from logmetrics_parsers.vllm import VllmParser
from logmetrics_parsers.vllm_requests import id_count

from logmetrics.events import Event
from tests.test_vllm_parser import ROOT, by_batches, by_records, nonzero, scan, stats_v1, totals, unwrap

SAMPLE = ROOT / "samples" / "vllm" / "exact-tokens.log"
M = ("qwen2.5-7b",)
ARGS = ("INFO 09-15 10:00:00 [utils.py:328] non-default args: {'model': 'Qwen/Qwen2.5-7B-Instruct', "
        "'served_model_name': ['qwen2.5-7b']}\n")


def logged_list(line: str, key: str) -> list[int] | None:
    """The token-id list a request-log line ends with, read with Python's own literal parser."""
    tail = line.rsplit(f", {key}: ", 1)[-1]
    value = ast.literal_eval(tail[: tail.index("]") + 1]) if tail.startswith("[") else None
    return value if isinstance(value, list) else None


def received(ts: str, rid: str, ids: list[int], prompt: str = "hi") -> str:
    """A 0.10-format Received request line with its prompt's ids."""
    return (f"INFO 09-15 {ts} [logger.py:40] Received request {rid}: prompt: {prompt!r}, params: SamplingParams(n=1), "
            f"prompt_token_ids: {ids}, prompt_embeds shape: None, lora_request: None.\n")


def generated(ts: str, rid: str, ids: list[int] | None, stream: str = "") -> str:
    """A 0.10-format Generated response line."""
    return (f"INFO 09-15 {ts} [logger.py:72] Generated response {rid}{stream}: output: 'x', "
            f"output_token_ids: {ids}, finish_reason: stop\n")


def rules(events: list[Event], metric: str) -> set[str]:
    """The rules of the non-zero events of ``metric``."""
    return {e.rule for e in events if e.metric == metric and e.value}


def test_sample_tokens_equal_the_sum_of_the_logged_lists() -> None:
    """On the sample, token totals are the sums of the logged id lists, counted here independently."""
    text = unwrap(SAMPLE)
    prompt = gen = 0
    for line in text.splitlines():
        if "] Received request " in line:
            ids = logged_list(line, "prompt_token_ids")
            prompt += len(ids or [])
        elif "] Generated response " in line:
            ids = logged_list(line, "output_token_ids")
            gen += len(ids or [])
    assert (prompt, gen) == (32, 12)
    events, _ = scan(text)
    got = totals(events)
    assert got[("llm_prompt_tokens_total", M)] == prompt
    assert got[("llm_generation_tokens_total", M)] == gen
    # the access lines count the 3 requests; the Generated line before the first of them counted one
    # already (the switch to the access source, once per stream, can count one request twice)
    assert got[("llm_requests_total", (*M, "ok"))] == 4.0
    assert got[("llm_request_duration_seconds", M)] == [1.0, 2.0, 4.0]
    assert rules(events, "llm_prompt_tokens_total") == {"request_log"}
    assert by_batches(text, 700) == by_records(text)


def test_integral_stops_per_series_where_exact_counts_begin() -> None:
    """Prompt: stats lines before the first exact line integrate it, those after do not; generation
    (outputs are logged for some requests only) follows the larger of estimate and logged count."""
    text = (ARGS + stats_v1("09-15 10:00:00", 100.0, 10.0) + stats_v1("09-15 10:00:10", 100.0, 10.0)
            + received("10:00:12", "chatcmpl-a", [1, 2, 3])
            + stats_v1("09-15 10:00:20", 100.0, 10.0)  # prompt exact from here, generation not yet
            + generated("10:00:21", "chatcmpl-a", [7, 8])
            + stats_v1("09-15 10:00:30", 100.0, 10.0))
    for events in (scan(text)[0], [e for line in text.splitlines(keepends=True) for e in scan_keep(line)]):
        got = nonzero(events)
        assert got[("llm_prompt_tokens_total", M)] == 2000.0 + 3.0
        assert got[("llm_generation_tokens_total", M)] == 100.0 * 4
    assert rules(scan(text)[0], "llm_generation_tokens_total") == {"stats_v1"}


def test_generation_is_never_below_the_estimate_nor_the_logged_count() -> None:
    """Outputs logged for few requests do not lower the estimate; outputs beyond it are followed."""
    few = (ARGS + stats_v1("09-15 10:00:00", 10.0, 10.0) + received("10:00:02", "chatcmpl-a", [1, 2])
           + generated("10:00:05", "chatcmpl-a", [7, 8]) + stats_v1("09-15 10:00:10", 10.0, 10.0))
    assert nonzero(scan(few)[0])[("llm_generation_tokens_total", M)] == 200.0
    many = (ARGS + stats_v1("09-15 10:00:00", 0.0, 0.1) + received("10:00:02", "chatcmpl-a", [1, 2])
            + generated("10:00:05", "chatcmpl-a", [7, 8, 9, 10]))
    got = scan(many)[0]
    assert nonzero(got)[("llm_generation_tokens_total", M)] == 4.0
    assert rules(got, "llm_generation_tokens_total") == {"request_log"}


PARSER: list[VllmParser] = []


def scan_keep(line: str) -> list[Event]:
    """``scan`` of one line with the parser of the previous calls (reset by ``ARGS``)."""
    if line == ARGS or not PARSER:
        PARSER[:] = [VllmParser()]
    return scan(line, PARSER[0])[0]


def body(prompt: int, completion: int) -> str:
    """A logged non-streaming response body (VLLM_DEBUG_LOG_API_SERVER_RESPONSE)."""
    return ('INFO 09-15 10:00:05 [api_server.py:1150] response_body={{"id":"chatcmpl-9","object":"chat.completion",'
            '"model":"qwen2.5-7b","choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}],'
            f'"usage":{{"prompt_tokens":{prompt},"total_tokens":{prompt + completion},'
            f'"completion_tokens":{completion},"prompt_tokens_details":null}},"prompt_logprobs":null}}}}\n')


def test_usage_bodies_count_until_the_request_log_takes_over() -> None:
    """Response bodies count tokens and a finished request; once request-log lines count, bodies do not."""
    text = ARGS + body(47, 7) + body(10, 2)
    events, matched = scan(text)
    got = nonzero(events)
    assert got[("llm_prompt_tokens_total", M)] == 57.0
    assert got[("llm_generation_tokens_total", M)] == 9.0
    assert got[("llm_requests_total", (*M, "ok"))] == 2.0
    assert rules(events, "llm_prompt_tokens_total") == {"usage"}
    assert matched == 3
    more = text + received("10:00:06", "chatcmpl-b", [1, 2]) + generated("10:00:07", "chatcmpl-b", [5]) + body(2, 1)
    got = nonzero(scan(more)[0])
    assert got[("llm_prompt_tokens_total", M)] == 59.0
    assert got[("llm_generation_tokens_total", M)] == 10.0
    assert got[("llm_requests_total", (*M, "ok"))] == 3.0
    streamed = ARGS + body(5, 5).replace("response_body={{", "response_body={data: {")
    assert ("llm_prompt_tokens_total", M) not in nonzero(scan(streamed)[0])


def test_max_log_len_keeps_the_integral() -> None:
    """With --max-log-len the lists may be cut: tokens stay integrated, requests and durations still count."""
    args = ARGS.replace("}\n", ", 'max_log_len': 4}\n")
    text = (args + stats_v1("09-15 10:00:00", 100.0, 10.0) + received("10:00:02", "chatcmpl-a", [1, 2, 3, 4])
            + generated("10:00:05", "chatcmpl-a", [7, 8]) + stats_v1("09-15 10:00:10", 100.0, 10.0))
    events, _ = scan(text)
    got = totals(events)
    assert got[("llm_prompt_tokens_total", M)] == 2000.0
    assert got[("llm_generation_tokens_total", M)] == 200.0
    assert got[("llm_requests_total", (*M, "ok"))] == 1.0
    assert got[("llm_request_duration_seconds", M)] == [3.0]
    assert by_batches(text, 200) == by_records(text)


def test_newer_formats_details_lines_and_starts_without_ids() -> None:
    """0.13+: ids on DEBUG details lines; Received lines without ids pair from the first Generated line on."""
    def received_v13(ts: str, rid: str) -> str:
        return (f"INFO 09-15 {ts} [logger.py:37] Received request {rid}: params: SamplingParams(n=1), "
                "lora_request: None.\n")

    def details(rid: str, ids: str) -> str:
        return (f"DEBUG 09-15 10:00:01 [logger.py:47] Request {rid} details: prompt: 'x', prompt_token_ids: {ids}, "
                "prompt_embeds shape: None.\n")

    text = (ARGS + received_v13("10:00:01", "chatcmpl-a") + details("chatcmpl-a", "[1, 2, 3, 4, 5]")
            + details("chatcmpl-n", "None") + generated("10:00:03", "chatcmpl-a", [9, 9, 9])
            + received_v13("10:00:04", "chatcmpl-b") + details("chatcmpl-b", "[1]")
            + generated("10:00:10", "chatcmpl-b", [9]))
    got = nonzero(scan(text)[0])
    assert got[("llm_prompt_tokens_total", M)] == 6.0
    assert got[("llm_generation_tokens_total", M)] == 4.0
    assert got[("llm_requests_total", (*M, "ok"))] == 2.0
    assert got[("llm_request_duration_seconds", M)] == [6.0]  # the first start came before output logging showed
    assert by_batches(text, 300) == by_records(text)


def test_id_count_reads_the_last_list_and_refuses_cut_ones() -> None:
    """The last marker wins (a prompt may quote one); an empty list is 0; an unclosed one is unknown (-1)."""
    markers = (", prompt_token_ids: [",)
    assert id_count("prompt: 'a, prompt_token_ids: [1, 2]', prompt_token_ids: [5, 6, 7], x", markers) == 3
    assert id_count("prompt_token_ids: [], x", ("prompt_token_ids: [",)) == 0
    assert id_count(", prompt_token_ids: [1, 2, 3", markers) == -1
    assert id_count(", prompt_token_ids: None", markers) == -1


def test_a_log_line_quoted_in_a_prompt_or_output_counts_nothing() -> None:
    """A prompt or an output that quotes a request-log line (on the same physical line) adds no tokens or requests."""
    quoted_gen = generated("10:00:09", "chatcmpl-fake", [9707, 0, 1, 2, 3]).rstrip("\n")
    quoted_rec = received("10:00:09", "chatcmpl-q", [1, 2, 3, 4, 5, 6, 7, 8]).rstrip("\n")
    text = (ARGS + received("10:00:01", "r1", [5, 6, 7], prompt=f"why does my log say:\n{quoted_gen}\n?")
            + generated("10:00:02", "r1", [8, 9]).replace("output: 'x'", f"output: {quoted_rec!r}"))
    got = nonzero(scan(text)[0])
    assert got[("llm_prompt_tokens_total", ("qwen2.5-7b",))] == 3
    assert got[("llm_generation_tokens_total", ("qwen2.5-7b",))] == 2
    assert got[("llm_requests_total", ("qwen2.5-7b", "ok"))] == 1
    assert by_batches(text, 100) == by_records(text)


def test_no_duration_from_stamps_in_the_same_second() -> None:
    """The stamps have a resolution of one second: a request begun and ended within one gives no (fake 0) duration."""
    text = (ARGS + received("10:00:02", "chatcmpl-a", [1]) + generated("10:00:02", "chatcmpl-a", [7])
            + received("10:00:03", "chatcmpl-b", [1]) + generated("10:00:05", "chatcmpl-b", [7]))
    assert totals(scan(text)[0])[("llm_request_duration_seconds", M)] == [2.0]
