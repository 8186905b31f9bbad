"""``roost serve``'s JWT options (``roost.cli.jwt_options``) and PyJWT as an optional dependency
(``docs/security.md``, *Tokens from an identity provider*): a real server process reached over HTTP
and WebSockets, a JWKS file, keys made in the test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from roost.testing import connect, until
from roost.transport.tokens import TokenSigner
from tests.jwt_support import AUDIENCE, EC_1, ISSUER, bearer, claims
from tests.support import ROOT, ServerProcess

SECRET = "j" * 40
signer = TokenSigner(SECRET)


def test_importing_roost_does_not_import_pyjwt_and_jwt_auth_without_it_says_how_to_install_it() -> None:
    script = (
        "import sys\n"
        "import roost, roost.transport.security, roost.transport.app\n"
        "assert 'jwt' not in sys.modules, 'PyJWT imported'\n"
        "sys.modules['jwt'] = None  # as if it were not installed\n"
        "try:\n"
        "    roost.transport.security.jwt_authenticate('jwks.json', issuer='i', audience='a')\n"
        "except RuntimeError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == "JWT authentication needs PyJWT with cryptography: pip install 'roost[jwt]'\n"


@pytest.mark.slow
async def test_roost_serve_takes_a_jwks_an_issuer_and_an_audience_beside_roost_secret(tmp_path: Path) -> None:
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [EC_1.jwk()]}))
    args = [
        "--jwks",
        str(jwks),
        "--jwt-issuer",
        ISSUER,
        "--jwt-audience",
        AUDIENCE,
        "--jwt-claim",
        "tenant=org",
    ]
    server = ServerProcess(tmp_path / "data", *args, env={"ROOST_SECRET": SECRET}).start()
    token = EC_1.sign(claims(time.time(), sub="ann", org="acme"))
    wrong = EC_1.sign(claims(time.time(), aud="other"))
    no_kinds = EC_1.sign({k: v for k, v in claims(time.time()).items() if k != "kinds"})
    try:
        base = f"{server.http}/agents/counter/c1/rpc/increment"
        async with httpx.AsyncClient() as http:
            assert (await http.post(base, headers=bearer(token))).json()["result"] == 1
            # roost token's tokens too (an operator's); no tenant, so another counter than acme's
            operator = signer.issue("op", ttl=60)
            assert (await http.post(base, headers=bearer(operator))).json()["result"] == 1
            assert (await http.post(base, headers=bearer(wrong))).status_code == 401
            assert (await http.post(base, headers=bearer(no_kinds))).status_code == 401  # no default kinds
        async with connect(f"{server.ws}/agents/counter/c1", additional_headers=bearer(wrong)) as ws:
            assert await ws.close_code() == 4401
        # bounded: the log line is written by the server process
        await until(lambda: any("wrong audience" in line for line in server.log), timeout=5, interval=0.05)
        await until(lambda: any("the token grants no kinds" in line for line in server.log), timeout=5)
    finally:
        server.kill()
    assert not any(token in line or wrong in line for line in server.log)


@pytest.mark.slow
async def test_roost_serve_gives_jwts_without_kinds_its_default_kinds_read_only_in_its_default_tenant(
    tmp_path: Path,
) -> None:
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [EC_1.jwk()]}))
    args = ["--jwks", str(jwks), "--jwt-issuer", ISSUER, "--jwt-audience", AUDIENCE]
    args += ["--jwt-default-kind", "counter", "--jwt-default-tenant", "idp"]
    server = ServerProcess(tmp_path / "data", *args, env={"ROOST_SECRET": SECRET}).start()
    bare = EC_1.sign({k: v for k, v in claims(time.time()).items() if k != "kinds"})
    writer = EC_1.sign(claims(time.time(), kinds=["counter"]))
    try:
        rpc = f"{server.http}/agents/counter/c1/rpc"
        async with httpx.AsyncClient() as http:
            assert (await http.post(f"{rpc}/increment", headers=bearer(writer))).json()["result"] == 1
            assert (await http.post(f"{rpc}/get", headers=bearer(bare))).json()["result"] == 1  # same tenant
            assert (await http.post(f"{rpc}/increment", headers=bearer(bare))).status_code == 403
            operator = signer.issue("op", ttl=60)  # no tenant: not the idp tenant's counter
            assert (await http.post(f"{rpc}/increment", headers=bearer(operator))).json()["result"] == 1
    finally:
        server.kill()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--jwks", "jwks.json"], "--jwks needs --jwt-issuer and --jwt-audience"),
        (["--jwt-issuer", ISSUER], "--jwt-issuer, --jwt-audience, --jwt-algorithm"),
        (
            ["--jwks", "missing.json", "--jwt-issuer", "i", "--jwt-audience", "a"],
            "--jwks missing.json: no such file",
        ),
        (
            ["--jwks", "https://idp/jwks", "--jwt-issuer", "i", "--jwt-audience", "a", "--jwt-claim", "sub"],
            "--jwt-claim sub: expected FIELD=CLAIM",
        ),
        (
            [
                "--jwks",
                "https://idp/jwks",
                "--jwt-issuer",
                "i",
                "--jwt-audience",
                "a",
                "--jwt-algorithm",
                "HS256",
            ],
            "JWT algorithms must be some of",
        ),
        (
            ["--jwks", "http://idp.example/jwks", "--jwt-issuer", "i", "--jwt-audience", "a"],
            "the JWKS URL http://idp.example/jwks must be https:// (http:// only to a loopback address",
        ),
        (
            ["--jwks", "jwks.json", "--jwt-issuer", "i", "--jwt-audience", "a", "--jwt-claim", "kinds="],
            "with no kinds claim mapped, default kinds are needed",
        ),
        (["--jwt-default-kind", "counter"], "--jwt-default-kind: --jwt-issuer"),
        (
            [
                "--jwks",
                "jwks.json",
                "--jwt-issuer",
                "i",
                "--jwt-audience",
                "a",
                "--jwt-default-kind",
                "countr",
            ],
            "--jwt-default-kind countr: the app has no such kind (its kinds: ",
        ),
        (
            ["--jwks", "jwks.json", "--jwt-issuer", "i", "--jwt-audience", "a", "--jwt-default-tenant", ""],
            "the default tenant must be",
        ),
    ],
)
def test_roost_serve_refuses_incomplete_jwt_settings_with_a_usage_error(
    tmp_path: Path, args: list[str], message: str
) -> None:
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [EC_1.jwk()]}))
    out = subprocess.run(
        [sys.executable, "-m", "roost.cli", "serve", "--data", str(tmp_path / "data"), "--port", "0", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert out.returncode == 2, out.stderr
    assert message in out.stderr, out.stderr
