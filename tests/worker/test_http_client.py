"""The executors' HTTP client against the hostile server (real sockets on loopback, no worker):
address pinning, Host/SNI, the wall-clock deadline, the read cap, redirects, refusals."""
from __future__ import annotations

import socket
import ssl
import subprocess
import threading
import time

import certifi
import pytest

from worker.executors.http_client import EgressPolicy, HttpRequest, TransportFailure, send
from tests.hostile_server import TRICKLE_SHAPES, HostileServer
from toolops.decisions.egress import EgressRefused


@pytest.fixture(scope="module")
def hostile():
    server = HostileServer().start()
    yield server
    server.stop()


def _policy(hostile, **overrides) -> EgressPolicy:
    values = dict(deadline=time.monotonic() + 5, max_response_bytes=65536, follow_redirects=0, url_from_arguments=True,
                  grants=({"scope_kind": "url_prefix", "scope_values": [f"{hostile.base}/"]},))
    values.update(overrides)
    return EgressPolicy(**values)


def _get(url, headers=None):
    return HttpRequest("GET", url, headers or {}, secret_headers=frozenset({"authorization"}))


def test_it_fetches_inside_the_scope_keeping_the_host_header(hostile):
    resp = send(_get(f"{hostile.base}/page/small"), _policy(hostile))
    assert resp.status == 200 and b"small page" in resp.body and not resp.truncated
    assert hostile.log[-1]["headers"]["Host"] == f"127.0.0.1:{hostile.port}"
    assert hostile.log[-1]["headers"]["Accept-Encoding"] == "identity"


def test_it_stops_reading_at_the_cap_without_reading_the_rest(hostile):
    started = time.monotonic()
    resp = send(_get(f"{hostile.base}/big?mb=300"), _policy(hostile, max_response_bytes=100_000))
    assert resp.truncated and len(resp.body) == 100_000
    assert time.monotonic() - started < 3
    assert hostile.big_completed == 0


@pytest.mark.parametrize("shape", TRICKLE_SHAPES)
def test_it_ends_a_trickle_at_the_wall_clock_deadline(hostile, shape):
    """However the answer is framed: before, an answer that ends with the connection (HTTP/1.0,
    Connection: close) was read to its end, 30 s, because its socket had moved to the response."""
    started = time.monotonic()
    with pytest.raises(TransportFailure) as exc:
        send(_get(f"{hostile.base}/trickle?bytes=30&shape={shape}"), _policy(hostile, deadline=time.monotonic() + 1.5))
    assert exc.value.deadline and exc.value.reached
    assert time.monotonic() - started < 2.5


def test_one_watchdog_thread_ends_each_concurrent_trickle_at_its_own_deadline(hostile):
    """Deadlines are kept by one thread per process (not a timer per request): exchanges with
    different deadlines, started together and in reverse order, each end at their own, and a
    request that finished in time is left alone."""
    deadlines = {"late": 2.4, "early": 0.8, "middle": 1.6}
    ended: dict[str, float] = {}
    errors: dict[str, TransportFailure] = {}
    started = time.monotonic()

    def fetch(name: str) -> None:
        try:
            send(_get(f"{hostile.base}/trickle?bytes=30"), _policy(hostile, deadline=started + deadlines[name]))
        except TransportFailure as exc:
            errors[name] = exc
        ended[name] = time.monotonic() - started

    threads = [threading.Thread(target=fetch, args=(name,)) for name in deadlines]
    for thread in threads:
        thread.start()
    quick = send(_get(f"{hostile.base}/page/small"), _policy(hostile, deadline=time.monotonic() + 0.5))
    for thread in threads:
        thread.join(10)
    assert quick.status == 200
    assert set(errors) == set(deadlines) and all(exc.deadline for exc in errors.values())
    for name, deadline in deadlines.items():
        assert deadline <= ended[name] < deadline + 0.6, (name, ended)
    watchers = [t for t in threading.enumerate() if t.name == "http-deadlines"]
    assert len(watchers) == 1


def test_it_answers_a_redirect_with_the_3xx_when_none_may_be_followed(hostile):
    before = len(hostile.log)
    resp = send(_get(f"{hostile.base}/chain/2"), _policy(hostile))
    assert resp.status == 302 and len(hostile.log) == before + 1


def test_it_follows_same_scope_hops_and_drops_secrets_across_origins(hostile):
    resp = send(_get(f"{hostile.base}/chain/3", {"Authorization": "Bearer s3cr3t"}), _policy(hostile, follow_redirects=3))
    assert resp.status == 200 and len(resp.hops) == 4
    # Another origin inside the scope (a second grant): the secret header is not sent there.
    other = HostileServer().start()
    try:
        grants = ({"scope_kind": "url_prefix", "scope_values": [f"{hostile.base}/", f"{other.base}/"]},)
        target = f"{hostile.base}/redirect?to={other.base}/page/small"
        resp = send(_get(target, {"Authorization": "Bearer s3cr3t"}), _policy(hostile, follow_redirects=1, grants=grants))
        assert resp.status == 200
        assert hostile.log[-1]["headers"].get("Authorization") == "Bearer s3cr3t"
        assert "Authorization" not in other.log[-1]["headers"]
    finally:
        other.stop()


@pytest.mark.parametrize("location,code", [
    ("file:///etc/passwd", "scheme_refused"), ("gopher://127.0.0.1/", "scheme_refused"),
    ("http://localhost:{port}/page/small", "egress_out_of_scope"), ("http://127.0.0.2:{port}/", "egress_out_of_scope"),
])
def test_it_refuses_a_hop_out_of_scope_before_sending_it(hostile, location, code):
    before = len(hostile.log)
    with pytest.raises(EgressRefused) as exc:
        send(_get(f"{hostile.base}/redirect?to={location.format(port=hostile.port)}"), _policy(hostile, follow_redirects=2))
    assert exc.value.code == code
    assert len(hostile.log) == before + 1  # only the first request went out


def test_it_keeps_a_fixed_endpoint_on_its_origin(hostile):
    policy = _policy(hostile, url_from_arguments=False, grants=(), follow_redirects=2,
                     openers=frozenset({("127.0.0.1", hostile.port)}))
    assert send(_get(f"{hostile.base}/chain/2"), policy).status == 200
    with pytest.raises(EgressRefused):
        send(_get(f"{hostile.base}/redirect?to=http://localhost:{hostile.port}/page/small"), policy)
    # Without the operator naming the address, loopback stays closed even for a fixed endpoint.
    with pytest.raises(EgressRefused) as exc:
        send(_get(f"{hostile.base}/page/small"), _policy(hostile, url_from_arguments=False, grants=()))
    assert exc.value.code == "egress_address_denied"


def test_it_says_not_reached_when_nothing_listens(hostile):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    policy = _policy(hostile, grants=({"scope_kind": "url_prefix", "scope_values": [f"http://127.0.0.1:{port}/"]},))
    with pytest.raises(TransportFailure) as exc:
        send(_get(f"http://127.0.0.1:{port}/x"), policy)
    assert exc.value.reached is False


def _tls_server_context(tmp_path) -> tuple[ssl.SSLContext, str]:
    """A server context with a fresh self-signed certificate for ``localhost``, and its file."""
    key, cert = tmp_path / "k.pem", tmp_path / "c.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"],
                   check=True, capture_output=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context, str(cert)


def test_it_ends_a_trickle_over_tls_that_ends_with_the_connection_at_the_deadline(tmp_path, monkeypatch):
    """Over TLS the socket the connection started from is detached into the TLS one, and an
    HTTP/1.0 answer takes that over: the deadline still shuts it. Before, this read ran to the end."""
    context, cert = _tls_server_context(tmp_path)
    monkeypatch.setattr(certifi, "where", lambda: cert)  # this test's certificate is the one trusted root
    server = HostileServer()
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.start()
    try:
        policy = EgressPolicy(deadline=time.monotonic() + 1.5, max_response_bytes=1000, url_from_arguments=False,
                              openers=frozenset({("127.0.0.1", server.port), ("::1", server.port)}))
        started = time.monotonic()
        with pytest.raises(TransportFailure) as exc:
            send(_get(f"https://localhost:{server.port}/trickle?bytes=30&shape=http10"), policy)
        assert exc.value.deadline and exc.value.reached
        assert time.monotonic() - started < 2.5
    finally:
        server.stop()


def test_it_connects_to_the_checked_address_with_the_host_name_as_tls_sni(tmp_path):
    """The socket goes to the address that was checked; TLS still names the host (SNI) and the
    certificate is checked against it — a self-signed one is refused before anything is sent."""
    context, _ = _tls_server_context(tmp_path)
    seen: list[str | None] = []
    context.sni_callback = lambda sock, name, ctx: seen.append(name)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]

    def serve():
        conn, _ = listener.accept()
        try:
            context.wrap_socket(conn, server_side=True).close()
        except (ssl.SSLError, OSError):
            pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    policy = EgressPolicy(deadline=time.monotonic() + 5, max_response_bytes=1000, url_from_arguments=False,
                          openers=frozenset({("127.0.0.1", port), ("::1", port)}))
    with pytest.raises(TransportFailure) as exc:
        send(_get(f"https://localhost:{port}/"), policy)
    thread.join(5)
    listener.close()
    assert seen == ["localhost"]
    assert exc.value.reached is False  # the handshake failed: no request was written


@pytest.mark.parametrize("host", ["2130706433", "0x7f000001", "0177.0.0.1", "127.1", "localhost", "[::1]",
                                  "[::ffff:127.0.0.1]", "0.0.0.0", "127.0.0.1."])
def test_it_refuses_loopback_however_the_host_spells_it(hostile, host):
    """Numeric, octal, hex, short and mapped spellings all resolve to a denied address; with a
    grant that allows any URL but names no address, nothing is sent."""
    before = len(hostile.log)
    with pytest.raises((EgressRefused, TransportFailure)) as exc:
        send(_get(f"http://{host}:{hostile.port}/page/small"), _policy(hostile, grants=({"scope_kind": "any"},)))
    assert isinstance(exc.value, EgressRefused) and exc.value.code in ("egress_address_denied", "bad_url"), exc.value
    assert len(hostile.log) == before
