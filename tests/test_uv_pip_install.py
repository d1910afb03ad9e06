"""tools/uv_pip_install.py: pip's configuration, as pip's loader returns it, turned into uv's options.

Each test feeds the items pip's ``Configuration`` yields (``"<section>.<option>": value``, with
``:env:`` for ``PIP_*`` variables) and checks what uv would be given."""
import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "uv_pip_install", Path(__file__).resolve().parent.parent / "tools" / "uv_pip_install.py")
uv_pip_install = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(uv_pip_install)
uv_options = uv_pip_install.uv_options


def pairs(args, flag):
    return [args[i + 1] for i, a in enumerate(args) if a == flag]


def test_this_machines_kind_of_config_reaches_uv_with_every_value():
    args, env, dropped = uv_options({
        "global.find-links": "/opt/wheels", "global.constraint": "/etc/c.txt",
        "global.extra-index-url": "file:///a/simple file:///b/simple", "global.cert": "/etc/ca.crt",
        ":env:.default-timeout": "180", ":env:.disable-pip-version-check": "1"})
    assert args[:2] == ["--index-strategy", "unsafe-best-match"], "uv must pick among indexes as pip does"
    assert pairs(args, "--extra-index-url") == ["file:///a/simple", "file:///b/simple"], args
    assert pairs(args, "--find-links") == ["/opt/wheels"], "the CPU torch wheel lives in find-links"
    assert pairs(args, "--constraint") == ["/etc/c.txt"] and pairs(args, "--cert") == ["/etc/ca.crt"], args
    assert "--system-certs" not in args, "a configured CA bundle replaces the system's store"
    assert env == {"UV_HTTP_TIMEOUT": "180"} and dropped == [], (env, dropped)


def test_pip_precedence_environment_then_install_section_then_global():
    args, _, _ = uv_options({"global.index-url": "https://g/simple", "install.index-url": "https://i/simple",
                             ":env:.index-url": "https://e/simple"})
    assert pairs(args, "--index-url") == ["https://e/simple"], args
    args, _, _ = uv_options({"global.index-url": "https://g/simple", "install.index-url": "https://i/simple"})
    assert pairs(args, "--index-url") == ["https://i/simple"], args


def test_an_empty_value_counts_as_unset_as_in_pip():
    args, _, _ = uv_options({":env:.extra-index-url": "", "global.extra-index-url": "file:///a/simple"})
    assert pairs(args, "--extra-index-url") == ["file:///a/simple"], \
        "an empty PIP_EXTRA_INDEX_URL must not hide the configured index"


@pytest.mark.parametrize("value, expected", [("true", True), ("1", True), ("false", False), ("0", False)])
def test_no_index(value, expected):
    args, _, _ = uv_options({"global.no-index": value, "global.find-links": "/w"})
    assert ("--no-index" in args) is expected, args


def test_without_a_ca_bundle_uv_trusts_the_systems_store():
    args, _, _ = uv_options({})
    assert "--system-certs" in args and "--cert" not in args, args


def test_keyring_trusted_host_proxy_and_client_certificate():
    args, env, dropped = uv_options({"global.keyring-provider": "subprocess", "global.trusted-host": "h1 h2",
                                     "global.proxy": "http://p:3128", "global.client-cert": "/c.pem"})
    assert pairs(args, "--keyring-provider") == ["subprocess"], args
    assert pairs(args, "--allow-insecure-host") == ["h1", "h2"], args
    assert env == {"HTTPS_PROXY": "http://p:3128", "SSL_CLIENT_CERT": "/c.pem"} and dropped == [], (env, dropped)
    args, _, _ = uv_options({"global.keyring-provider": "auto"})
    assert "--keyring-provider" not in args, "pip's auto has no uv equivalent: left to uv's default"


def test_an_option_uv_does_not_get_is_named_and_a_cosmetic_one_is_not():
    _, _, dropped = uv_options({":env:.pre": "1", "global.only-binary": ":all:", "global.quiet": "1",
                                "global.no-cache-dir": "1", "global.user": ""})
    assert dropped == ["only-binary", "pre"], dropped
