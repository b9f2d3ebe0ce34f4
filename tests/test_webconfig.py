"""``validate`` of the ``[server]`` table and of exporter-toolkit web config files: every problem
reported with its path, on real files and real certificates (issue 10 #7)."""

from __future__ import annotations

import re
from pathlib import Path

import bcrypt
import pytest

from monitor.config import ServerConfig, parse_config, parse_listen, with_server_flags
from monitor.errors import ConfigError
from monitor.webconfig import TlsConfig, load_web_config
from tests.certs import self_signed

MONITOR = {"name": "a", "scores": {"path": "s"}, "outcomes": {"path": "o"}}


def _server(server: dict[str, object], base: Path) -> ServerConfig:
    return parse_config({"server": server, "monitors": [MONITOR]}, base=base).server


def _problems(server: dict[str, object], base: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        _server(server, base)
    return info.value.problems


@pytest.mark.parametrize(
    ("listen", "host", "port"),
    [
        ("127.0.0.1:9464", "127.0.0.1", 9464),
        ("[::1]:9464", "::1", 9464),
        ("[::]:0", "::", 0),
        ("0.0.0.0:80", "0.0.0.0", 80),
        ("localhost:9464", "localhost", 9464),
        (":9464", "127.0.0.1", 9464),
    ],
)
def test_listen_addresses_accepted(listen: str, host: str, port: int, tmp_path: Path) -> None:
    server = _server({"listen": listen}, tmp_path)
    assert (server.host, server.port) == (host, port)
    assert parse_listen(server.listen) == (host, port)


@pytest.mark.parametrize(
    ("listen", "message"),
    [
        ("::1:9464", "put an IPv6 address in brackets"),
        ("[127.0.0.1]:9464", "is not an IPv6 address"),
        ("[::1]", "must be 'host:port'"),
        ("127.0.0.1:65536", "port in [0, 65535]"),
        ("256.1.1.1:80", "neither an IPv4 address nor a hostname"),
        ("bad_host!:80", "neither an IPv4 address nor a hostname"),
        ("no-such-host.invalid:80", "does not resolve"),
        (9464, "must be 'host:port'"),
    ],
)
def test_listen_addresses_rejected(listen: object, message: str, tmp_path: Path) -> None:
    (problem,) = _problems({"listen": listen}, tmp_path)
    assert problem.startswith("server.listen: ")
    assert message in problem


def test_tls_files_must_exist_and_load(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    server = _server({"tls_cert_file": cert.name, "tls_key_file": key.name}, tmp_path)
    assert server.tls() == TlsConfig(cert_file=cert, key_file=key)
    (problem,) = _problems({"tls_cert_file": "missing.crt", "tls_key_file": key.name}, tmp_path)
    assert problem == f"server.tls_cert_file: file not found: {tmp_path / 'missing.crt'}"
    garbage = tmp_path / "garbage.crt"
    garbage.write_text("not a certificate\n")
    (problem,) = _problems({"tls_cert_file": garbage.name, "tls_key_file": key.name}, tmp_path)
    assert problem.startswith("server.tls_cert_file: cannot load the certificate or key")
    _, other_key = self_signed(tmp_path, "other")
    (problem,) = _problems({"tls_cert_file": cert.name, "tls_key_file": other_key.name}, tmp_path)
    assert "cannot load the certificate or key" in problem  # key does not match the cert
    (problem,) = _problems({"tls_cert_file": cert.name}, tmp_path)
    assert problem == "server: tls_cert_file and tls_key_file must be given together"


def test_server_limits_iv(tmp_path: Path) -> None:
    problems = _problems(
        {"max_connections": 0, "request_timeout": "-1s", "idle_timeout": 5, "nope": 1},
        tmp_path,
    )
    assert problems[0].startswith("server.nope: unknown key")
    assert any(
        p.startswith("server.max_connections: must be an integer in [1, 10000]") for p in problems
    )
    assert any(p.startswith("server.request_timeout: ") for p in problems)
    assert any(p.startswith("server.idle_timeout: must be a duration") for p in problems)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "web.yml"
    path.write_text(text)
    return path


def test_web_config_full(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    ca, _ = self_signed(tmp_path, "ca")
    hashed = bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode()
    path = _write(
        tmp_path,
        f"tls_server_config:\n  cert_file: {cert.name}\n  key_file: {key.name}\n"
        f"  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: {ca.name}\n"
        f"  min_version: TLS13\n  prefer_server_cipher_suites: true\n"
        f"http_server_config:\n  http2: false\n  headers:\n"
        f"    x-frame-options: deny\n    Strict-Transport-Security: max-age=31536000\n"
        f"basic_auth_users:\n  alice: '{hashed}'\n",
    )
    web, problems = load_web_config(path)
    assert problems == []
    assert web is not None
    assert web.tls == TlsConfig(
        cert_file=cert,
        key_file=key,
        client_auth_type="VerifyClientCertIfGiven",
        client_ca_file=ca,
        min_version="TLS13",
    )
    assert web.headers == {
        "X-Frame-Options": "deny",
        "Strict-Transport-Security": "max-age=31536000",
    }
    assert web.basic_auth_users == {"alice": hashed.encode()}
    server = _server({"web_config_file": path.name}, tmp_path)
    assert server.web == web
    assert server.tls() == web.tls


def test_web_config_iv(tmp_path: Path) -> None:
    cert, _ = self_signed(tmp_path)
    path = _write(
        tmp_path,
        "tls_server_config:\n"
        f"  cert_file: {cert.name}\n"
        "  key: inline\n"
        "  client_auth_type: RequireAnyClientCert\n"
        "  min_version: TLS14\n"
        "  cipher_suites: [TLS_AES_128_GCM_SHA256]\n"
        "http_server_config:\n"
        "  http2: maybe\n"
        "  headers:\n    Set-Cookie: x\n    X-Frame-Options: [deny]\n"
        # the values exporter-toolkit refuses for these two
        "    X-Content-Type-Options: sniff\n    x-frame-options: allow-from https://evil.example\n"
        # a value http.server cannot encode (Latin-1, strictly): every answer once failed
        "    Content-Security-Policy: \"default-src 'none' \u2013 x\"\n"
        '    Strict-Transport-Security: "max-age=1\\0"\n'
        "basic_auth_users:\n  bob: plaintext\n  'a:b': '$2y$10$'\n"
        # a '$2$' prefix that bcrypt never matches (the user locked out without a word)
        f"  carol: '$2$10${'a' * 53}'\n"
        # costs bcrypt refuses: 99 passed, then its check never ended; 03 never matched
        f"  dave: '$2b$99${'a' * 53}'\n  erin: '$2b$03${'a' * 53}'\n"
        "rate_limit: {interval: 1s, burst: 2}\n"
        "tls_config: {}\n",
    )
    web, problems = load_web_config(path)
    assert web is None
    assert problems == [
        "rate_limit: not supported",
        "tls_config: unknown key (known: basic_auth_users, http_server_config, tls_server_config)",
        "tls_server_config.cipher_suites: not supported (Go cipher suite names have no OpenSSL "
        "equivalent here)",
        "tls_server_config.key: inline PEM is not supported; use key_file",
        "tls_server_config.min_version: must be one of TLS10, TLS11, TLS12, TLS13; got 'TLS14'",
        "tls_server_config: cert_file and key_file are both required",
        "tls_server_config.client_auth_type: RequireAnyClientCert (accept a client certificate "
        "without verifying it) cannot be served by Python's ssl module; use "
        "VerifyClientCertIfGiven or RequireAndVerifyClientCert",
        "http_server_config.http2: must be true or false",
        "http_server_config.headers.Set-Cookie: not settable (allowed: Content-Security-Policy, "
        "X-Frame-Options, X-Content-Type-Options, X-XSS-Protection, Strict-Transport-Security)",
        "http_server_config.headers.X-Frame-Options: must be a one-line string; got ['deny']",
        "http_server_config.headers.X-Content-Type-Options: must be one of 'nosniff'; got 'sniff'",
        "http_server_config.headers.x-frame-options: must be one of 'deny', 'sameorigin'; got "
        "'allow-from https://evil.example'",
        "http_server_config.headers.Content-Security-Policy: must be printable ASCII (RFC 9110 "
        "field values); got '\u2013' in \"default-src 'none' \u2013 x\"",
        "http_server_config.headers.Strict-Transport-Security: must be printable ASCII (RFC "
        "9110 field values); got '\\x00' in 'max-age=1\\x00'",
        "basic_auth_users.bob: must be a bcrypt hash like '$2y$10$' followed by 53 characters "
        "(htpasswd -nBC 10 \"\" | tr -d ':\\n')",
        "basic_auth_users.a:b: a user name must be non-empty and contain no ':'",
        "basic_auth_users.carol: must be a bcrypt hash like '$2y$10$' followed by 53 characters "
        "(htpasswd -nBC 10 \"\" | tr -d ':\\n')",
        "basic_auth_users.dave: a bcrypt cost must be 04 to 31; got 99",
        "basic_auth_users.erin: a bcrypt cost must be 04 to 31; got 03",
    ]


def test_web_config_tls_policy_and_files(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    base = f"tls_server_config:\n  cert_file: {cert.name}\n  key_file: {key.name}\n"
    cases = {
        "  client_auth_type: RequireAndVerifyClientCert\n": "tls_server_config.client_ca_file: "
        "is required with client_auth_type RequireAndVerifyClientCert",
        f"  client_ca_file: {cert.name}\n": "tls_server_config.client_ca_file: is set but "
        "client_auth_type is NoClientCert",
        "  min_version: TLS13\n  max_version: TLS12\n": "tls_server_config: min_version TLS13 "
        "is above max_version TLS12",
    }
    for extra, expected in cases.items():
        _, problems = load_web_config(_write(tmp_path, base + extra))
        assert len(problems) == 1
        assert problems[0].startswith(expected), problems
    missing = "tls_server_config:\n  cert_file: gone.crt\n  key_file: gone.key\n"
    _, problems = load_web_config(_write(tmp_path, missing))
    assert problems == [f"tls_server_config: file not found: {tmp_path / 'gone.crt'}"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("tls_server_config: [\n", "not valid YAML"),
        ("- a list\n", "(document): must be a mapping with string keys; got list"),
        ("basic_auth_users: 3\n", "basic_auth_users: must be a mapping with string keys"),
    ],
)
def test_web_config_shape(tmp_path: Path, text: str, expected: str) -> None:
    _, problems = load_web_config(_write(tmp_path, text))
    assert problems[0].startswith(expected), problems
    assert load_web_config(tmp_path / "absent.yml")[1][0].startswith("cannot read the file")


def test_validate_reports_web_config_problems_with_both_paths(tmp_path: Path) -> None:
    path = _write(tmp_path, "basic_auth_users:\n  bob: plaintext\n")
    (problem,) = _problems({"web_config_file": "web.yml"}, tmp_path)
    assert problem.startswith(f"server.web_config_file: {path}: basic_auth_users.bob: ")


def test_tls_in_both_places_is_refused(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    _write(tmp_path, f"tls_server_config:\n  cert_file: {cert.name}\n  key_file: {key.name}\n")
    (problem,) = _problems(
        {"web_config_file": "web.yml", "tls_cert_file": cert.name, "tls_key_file": key.name},
        tmp_path,
    )
    assert problem.startswith("server: TLS is set twice")


def test_flags_override_the_toml(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    doc: dict[str, object] = {
        "server": {"listen": "127.0.0.1:1", "web_config_file": "none.yml"},
        "monitors": [MONITOR],
    }
    with pytest.raises(ConfigError):
        parse_config(doc, base=tmp_path)
    config = parse_config({"monitors": [MONITOR]}, base=tmp_path)
    web = _write(tmp_path, f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n")
    flagged = with_server_flags(config, listen="[::1]:9464", web_config_file=web)
    assert (flagged.server.host, flagged.server.port) == ("::1", 9464)
    assert flagged.server.listen == "[::1]:9464"
    assert flagged.server.tls() == TlsConfig(cert_file=cert, key_file=key)
    with pytest.raises(ConfigError) as info:
        with_server_flags(config, listen="::1:9464", web_config_file=tmp_path / "x.yml")
    assert [p.split(":", 1)[0] for p in info.value.problems] == [
        "--web.listen-address",
        "--web.config.file",
    ]


def test_the_documented_web_config_example_is_valid(tmp_path: Path) -> None:
    doc = (Path(__file__).resolve().parent.parent / "docs" / "operations.md").read_text()
    (block,) = re.findall(r"```yaml\n(tls_server_config:.*?)```", doc, flags=re.S)
    cert, key = self_signed(tmp_path)
    ca, _ = self_signed(tmp_path, "ca")
    text = block.replace("/etc/retrieval-monitor/tls/server.crt", str(cert))
    text = text.replace("/etc/retrieval-monitor/tls/server.key", str(key))
    text = text.replace("/etc/retrieval-monitor/tls/scrapers-ca.crt", str(ca))
    web, problems = load_web_config(_write(tmp_path, text))
    assert problems == []
    assert web is not None
    assert web.tls is not None
    assert web.tls.client_auth_type == "RequireAndVerifyClientCert"
    (hashed,) = web.basic_auth_users.values()
    assert bcrypt.checkpw(b"change-me", hashed)


def test_relative_files_of_a_web_config_reached_through_a_linked_directory(
    tmp_path: Path,
) -> None:
    """``etc/rm`` links to ``srv/cfg/rm``; the config there names ``../web/web.yml``, which
    the kernel opens as ``srv/cfg/web/web.yml``, and that file names ``server.crt`` beside
    it. Collapsing '..' lexically once looked for the certificate in ``etc/web``."""
    from monitor.config import load_config

    real = tmp_path / "srv" / "cfg"
    (real / "rm").mkdir(parents=True)
    (real / "web").mkdir()
    cert, key = self_signed(real / "web")
    (real / "web" / "web.yml").write_text(
        f"tls_server_config:\n  cert_file: {cert.name}\n  key_file: {key.name}\n"
    )
    (real / "rm" / "monitor.toml").write_text(
        '[server]\nweb_config_file = "../web/web.yml"\n'
        '[[monitors]]\nname = "m"\nscores.path = "s"\noutcomes.path = "o"\n'
    )
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "rm").symlink_to(real / "rm")
    config = load_config(tmp_path / "etc" / "rm" / "monitor.toml")
    assert config.server.web is not None
    assert config.server.web.tls is not None
    assert config.server.web.tls.cert_file.resolve() == cert.resolve()
