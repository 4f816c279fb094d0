"""`lookupd demo-data DIR --tls` (`make demo-tls`): the sample log dir served over mutual TLS with an [[acl]].

openssl makes a CA, the daemon's certificate and two client certificates (the commands are in `RECIPE`, and
docs/configuration.md shows them); the config lets CN=orders-reader describe and read topic `orders` and
nothing else, and lets the local user (unix:<uid>) do anything on the Unix socket. The commands printed are
one query that is allowed and the same query with the other certificate, denied.

DIR/logs          the sample (lookupd.tools.demo)
DIR/tls           ca.pem, server.pem/.key, orders-reader.pem/.key, someone-else.pem/.key
DIR/lookupd.toml  the daemon's config
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess

from ..errors import LookupdError
from .demo import command_prefix, free_port, serve, write_sample

ALLOWED, DENIED = "orders-reader", "someone-else"  # client certificates' common names
DAYS = "30"
_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
# Extensions of the daemon's and the clients' certificates (openssl x509 -extfile).
EXTENSIONS = {
    "server.ext": "basicConstraints = CA:FALSE\nsubjectAltName = DNS:localhost, IP:127.0.0.1\n"
                  "extendedKeyUsage = serverAuth\n",
    "client.ext": "basicConstraints = CA:FALSE\nextendedKeyUsage = clientAuth\n",
}


def _signed(name: str, ext: str) -> list[list[str]]:
    """A key and a certificate request for CN=name, then the certificate signed by the CA."""
    return [["openssl", "req", *_KEY, "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.csr"],
            ["openssl", "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", DAYS, "-extfile", ext, "-out", f"{name}.pem"]]


# What the demo runs, in its tls directory (docs/configuration.md shows the same commands).
RECIPE = [["openssl", "req", "-x509", *_KEY, "-days", DAYS, "-subj", "/CN=lookupd demo CA", "-keyout", "ca.key",
           "-out", "ca.pem"],
          *_signed("server", "server.ext"), *_signed(ALLOWED, "client.ext"), *_signed(DENIED, "client.ext")]


def make_certificates(directory: str) -> None:
    """Run RECIPE in `directory`; LookupdError with openssl's words when a step fails."""
    if shutil.which("openssl") is None:
        raise LookupdError("openssl not found: install it (Debian: apt-get install openssl)")
    os.makedirs(directory, exist_ok=True)
    for name, text in EXTENSIONS.items():
        with open(os.path.join(directory, name), "w") as f:
            f.write(text)
    for argv in RECIPE:
        r = subprocess.run(argv, cwd=directory, capture_output=True, text=True)
        if r.returncode != 0:
            raise LookupdError(f"`{shlex.join(argv)}` failed: {r.stderr.strip().splitlines()[-1:]}")
    for name in os.listdir(directory):
        if name.endswith(".key"):
            os.chmod(os.path.join(directory, name), 0o600)


def write_config(root: str, tls: str, port: int) -> str:
    path = os.path.join(root, "lookupd.toml")
    with open(path, "w") as f:
        f.write(f"""# lookupd demo-data --tls: mutual TLS on 127.0.0.1:{port}, and who may do what
log_dirs = [{_toml(os.path.join(root, "logs"))}]
socket = {_toml(os.path.join(root, "lookupd.sock"))}
tcp = "127.0.0.1:{port}"
tls_cert_file = {_toml(os.path.join(tls, "server.pem"))}
tls_key_file = {_toml(os.path.join(tls, "server.key"))}
tls_client_ca_file = {_toml(os.path.join(tls, "ca.pem"))}   # mutual TLS: clients need a certificate it signed

[[acl]]
principal = "CN={ALLOWED}"
topics = ["orders"]
operations = ["describe", "read"]

[[acl]]
principal = "unix:{os.getuid()}"   # you, on the Unix socket
topics = ["*"]
operations = ["describe", "read"]
""")
    return path


def _toml(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def run(args) -> int:
    root = os.path.abspath(args.dir)
    write_sample(os.path.join(root, "logs"), args.records, args.seed)
    tls = os.path.join(root, "tls")
    make_certificates(tls)
    port = free_port()
    config = write_config(root, tls, port)
    lookupd = command_prefix("lookupd")

    def query(cert: str) -> str:
        return (f"{lookupd} query --socket tls://127.0.0.1:{port} --tls-ca {tls}/ca.pem --tls-cert {tls}/{cert}.pem "
                f"--tls-key {tls}/{cert}.key offset_for_timestamp orders 0 2026-01-01T10:00:00Z")
    print(f"lookupd serves {root}/logs over mutual TLS on 127.0.0.1:{port} ({config}); certificates made with "
          f"openssl in {tls} (docs/configuration.md shows how). In another terminal try:")
    print(f"  {query(ALLOWED)}")
    print(f"  {query(DENIED)}")
    print(f"The first is CN={ALLOWED}, whom an [[acl]] rule lets read topic orders; the second, CN={DENIED}, is "
          f"UNAUTHORIZED. (Ctrl-C stops it)", flush=True)
    return serve(config)
