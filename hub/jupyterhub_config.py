"""JupyterHub configuration of the course: the file an instructor starts a class server from.

    sudo .venv/bin/jupyterhub -f hub/jupyterhub_config.py      (make hub starts it for a try)

What it sets (JupyterHub 6.1.1, every setting checked against its installed source):
- PAMAuthenticator (JupyterHub's default, written out): the machine's Unix accounts and their
  passwords. Only the accounts named in COURSE_HUB_USERS (comma-separated) may log in;
  COURSE_HUB_ADMIN names the instructor (a hub admin). Unset: nobody may log in.
- LocalProcessSpawner: each account's server runs as that Unix user (the hub runs as root to
  switch users), in the account's home, from this checkout's venv (``jupyterhub-singleuser``), so
  every account has the course kernel ``debug-course`` (installed in the venv, ``--sys-prefix``)
  and the ``course`` package; JupyterLab opens.
- nbgrader for every account: the servers get ``JUPYTER_CONFIG_PATH=hub/jupyter``, whose
  ``nbgrader_config.py`` names the exchange (``COURSE_EXCHANGE``, default
  /srv/nbgrader/exchange) and the submission limits. On a server of your own you may instead copy
  that file to /etc/jupyter/nbgrader_config.py.
- The hub listens on 127.0.0.1 only (COURSE_HUB_IP to change, with TLS in front: this file sets
  none), port COURSE_HUB_PORT (8000); its API on COURSE_HUB_API_PORT (8081), the proxy's on
  COURSE_HUB_PROXY_API_PORT (8001). Its database, cookie secret and the proxy's pid file live in
  COURSE_HUB_STATE (default /srv/debug-course-hub). The proxy is configurable-http-proxy from
  hub/node_modules (``make proxy``).
Limits: one machine, local processes; no resource limits per account (a learner's kernel can use
the whole machine); Kubernetes (KubeSpawner) and ngshare are not tried (docs/instructors.md).
"""
import os
from pathlib import Path

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
VENV_BIN = REPO / ".venv" / "bin"
STATE = Path(os.environ.get("COURSE_HUB_STATE", "/srv/debug-course-hub"))
EXCHANGE = os.environ.get("COURSE_EXCHANGE", "/srv/nbgrader/exchange")

ip = os.environ.get("COURSE_HUB_IP", "127.0.0.1")
c.JupyterHub.bind_url = f"http://{ip}:{int(os.environ.get('COURSE_HUB_PORT', 8000))}"
c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{int(os.environ.get('COURSE_HUB_API_PORT', 8081))}"
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{int(os.environ.get('COURSE_HUB_PROXY_API_PORT', 8001))}"
c.ConfigurableHTTPProxy.command = [str(HERE / "node_modules" / ".bin" / "configurable-http-proxy")]
c.ConfigurableHTTPProxy.pid_file = str(STATE / "proxy.pid")
c.JupyterHub.db_url = f"sqlite:///{STATE / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(STATE / "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = str(STATE / "jupyterhub.pid")
# Stop every account's server when the hub stops (JupyterHub's default, written out).
c.JupyterHub.cleanup_servers = True
c.JupyterHub.cleanup_proxy = True

c.JupyterHub.authenticator_class = "pam"
users = {u.strip() for u in os.environ.get("COURSE_HUB_USERS", "").split(",") if u.strip()}
c.Authenticator.allowed_users = users
admin = os.environ.get("COURSE_HUB_ADMIN", "").strip()
c.Authenticator.admin_users = {admin} if admin else set()

c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [str(VENV_BIN / "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
c.Spawner.notebook_dir = "~"
# The spawner passes almost nothing of the hub's environment (Spawner.env_keep): the venv first on
# PATH (nbgrader and the kernel's tools), nbgrader's config for every account, and the exchange.
c.Spawner.environment = {
    "PATH": os.pathsep.join([str(VENV_BIN), "/usr/local/bin", "/usr/bin", "/bin"]),
    "JUPYTER_CONFIG_PATH": str(HERE / "jupyter"),
    "COURSE_EXCHANGE": EXCHANGE,
}
# A first start imports JupyterLab and nbgrader: on a slow shared machine that takes a while.
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
