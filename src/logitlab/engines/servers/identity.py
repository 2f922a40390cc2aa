"""Which server is behind a URL, and its build: from the endpoints each server documents.

Asked once when the ``openai`` engine loads; each question is one ``GET``
that other servers answer with 404 (or with something else, which is then
not taken for an answer):

============  ======================  =============================================================
server        endpoint                what is read
============  ======================  =============================================================
llama-server  ``GET /props``          ``build_info`` (llama.cpp build), ``model_path``, ``total_slots``,
                                      ``default_generation_settings.n_ctx``
vLLM          ``GET /version``        ``version``
SGLang        ``GET /server_info``,   ``version``, ``model_path``
              ``GET /get_server_info``
TGI           ``GET /info``           ``version``, ``model_id``, ``sha``
============  ======================  =============================================================

llama-cpp-python's server answers none of them (``kind`` ``"unknown"``).
Only llama-server's row was run here; the others follow each server's
documentation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from logitlab.engines.servers.http import ServerClient
from logitlab.errors import EngineError

__all__ = ["ServerInfo", "identify"]


@dataclass(frozen=True)
class ServerInfo:
    """What a server says about itself.

    Attributes:
        kind: ``"llama-server"``, ``"vllm"``, ``"sglang"``, ``"tgi"`` or ``"unknown"``.
        build: its version or build string (llama-server: ``build_info``, e.g. ``b6123-abcdef0``).
        model_path: the model it serves, where it says.
        n_ctx: its context per slot (llama-server).
        slots: parallel slots (llama-server).
        endpoint: the endpoint that answered (``GET /props`` …).
    """

    kind: str = "unknown"
    build: str | None = None
    model_path: str | None = None
    n_ctx: int | None = None
    slots: int | None = None
    endpoint: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def text(self) -> str:
        """``llama-server b6123-abcdef0`` / ``vLLM 0.6.3`` / ``unknown server``."""
        names = {"llama-server": "llama-server", "vllm": "vLLM", "sglang": "SGLang", "tgi": "TGI"}
        if self.kind == "unknown":
            return "unknown server"
        return f"{names[self.kind]} {self.build or '(build not given)'}"


def _get(client: ServerClient, path: str) -> dict | None:
    try:
        return client.get(path, root=True, retries=0)
    except EngineError:  # 404, not JSON, no answer: not this server
        return None


def identify(client: ServerClient) -> ServerInfo:
    """Ask the endpoints in the module table in turn; the first that answers in its server's shape wins."""
    props = _get(client, "/props")
    if props and ("build_info" in props or "default_generation_settings" in props):
        settings = props.get("default_generation_settings") or {}
        n_ctx = settings.get("n_ctx", props.get("n_ctx"))
        return ServerInfo("llama-server", props.get("build_info"), props.get("model_path"),
                          None if n_ctx is None else int(n_ctx),
                          None if props.get("total_slots") is None else int(props["total_slots"]), "GET /props")
    for path in ("/server_info", "/get_server_info"):
        info = _get(client, path)
        if info and "version" in info and ("model_path" in info or "tokenizer_path" in info):
            return ServerInfo("sglang", str(info["version"]), info.get("model_path"), endpoint=f"GET {path}")
    info = _get(client, "/info")
    if info and "model_id" in info and "version" in info:
        return ServerInfo("tgi", str(info["version"]), info.get("model_id"), endpoint="GET /info",
                          extra={"sha": info.get("sha")})
    version = _get(client, "/version")
    if version and isinstance(version.get("version"), str) and len(version) <= 3:
        return ServerInfo("vllm", version["version"], endpoint="GET /version")
    return ServerInfo()
