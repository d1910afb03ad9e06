"""Install into this Python's environment with uv, from the package sources pip is configured with.

    .venv/bin/python tools/uv_pip_install.py -r requirements.txt -e .     (what ``make venv`` runs)

uv reads none of pip's configuration, so this reads it with pip's own loader (its files and the
``PIP_*`` variables) and hands uv what decides where packages come from: index URLs, no-index,
find-links, constraints, trusted hosts, the CA bundle (or else the system's store, as pip 24.2 on
trusts), keyring, timeout, proxy and client certificate. uv then chooses among indexes as pip does
(the best version on any of them, not the first index with the name). Any other pip option that is
set is named, since uv does not get it; URLs are printed without their passwords.

Limits: pip's precedence is followed for one option at a time (``PIP_<NAME>``, then the
``[install]`` section, then ``[global]``; an empty value counts as unset, as in pip); pip's
``auto`` and ``import`` keyring providers have no uv equivalent and are not handed over.
"""
from __future__ import annotations

import os
import sys

# pip option -> uv flag, given once per value (find-links and the like take several)
FLAGS = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links",
         "constraint": "--constraint", "trusted-host": "--allow-insecure-host", "cert": "--cert"}
# pip option (any of these names) -> the environment variable uv reads instead
VARIABLES = {("timeout", "default-timeout"): "UV_HTTP_TIMEOUT", ("client-cert",): "SSL_CLIENT_CERT",
             ("proxy",): "HTTPS_PROXY"}
OTHER_HANDED = {"no-index", "keyring-provider"}
# options that change nothing about what is installed
COSMETIC = {"disable-pip-version-check", "no-cache-dir", "cache-dir", "progress-bar", "quiet", "verbose",
            "root-user-action", "no-color", "require-virtualenv", "no-python-version-warning", "retries", "log"}


def uv_options(values: dict[str, str]) -> tuple[list[str], dict[str, str], list[str]]:
    """From pip's configuration items (``{"global.find-links": "/opt/wheels", ":env:.cert": ...}``):
    uv's arguments, the environment variables to set for it, and the pip options it does not get."""
    from pip._internal.utils.misc import strtobool

    def pip_option(*names: str) -> list[str]:
        for section in (":env:", "install", "global"):
            for name in names:
                if values.get(f"{section}.{name}"):
                    return values[f"{section}.{name}"].split()
        return []

    args = ["--index-strategy", "unsafe-best-match"]
    for name, flag in FLAGS.items():
        args += [part for value in pip_option(name) for part in (flag, value)]
    no_index = pip_option("no-index")
    if no_index and strtobool(no_index[0]):
        args.append("--no-index")
    if not pip_option("cert"):
        args.append("--system-certs")
    keyring = pip_option("keyring-provider")
    if keyring in (["subprocess"], ["disabled"]):
        args += ["--keyring-provider", keyring[0]]
    env = {variable: pip_option(*names)[0] for names, variable in VARIABLES.items() if pip_option(*names)}
    handed = set(FLAGS) | OTHER_HANDED | {name for names in VARIABLES for name in names}
    set_here = {key.split(".", 1)[1] for key, value in values.items()
                if value and key.split(".", 1)[0] in (":env:", "install", "global")}
    return args, env, sorted(set_here - handed - COSMETIC)


def main(argv: list[str]) -> None:
    from pip._internal.configuration import Configuration
    from pip._internal.utils.misc import redact_auth_from_url

    config = Configuration(isolated=False)
    config.load()
    args, env, dropped = uv_options(dict(config.items()))
    if dropped:
        print("pip options uv is not given (they may change what it installs):", *dropped, flush=True)
    print("uv pip install", *map(redact_auth_from_url, args), *argv, flush=True)
    uv = os.path.join(os.path.dirname(sys.executable), "uv")
    os.execve(uv, [uv, "pip", "install", "--python", sys.executable, "--compile-bytecode", *args, *argv],
              dict(os.environ, **env))


if __name__ == "__main__":
    main(sys.argv[1:])
