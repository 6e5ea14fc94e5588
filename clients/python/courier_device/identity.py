"""A device's identity folder, as ``courier pki device-cert --out DIR`` makes it:
``cert.pem``, ``key.pem``, ``ca.pem`` and ``identity.json`` (device id,
generation, gateway, and the app tokens the device holds)."""
from __future__ import annotations

import json
import os
import ssl
import tempfile
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from .errors import BadIdentity


@dataclass
class Identity:
    directory: str
    device_id: str
    generation: int
    host: str
    production_port: int
    sandbox_port: int
    #: environment, then bundle id, to the hex token
    tokens: Dict[str, Dict[str, str]] = field(default_factory=dict)

    @property
    def certificate_path(self) -> str:
        return os.path.join(self.directory, "cert.pem")

    @property
    def key_path(self) -> str:
        return os.path.join(self.directory, "key.pem")

    @property
    def ca_path(self) -> str:
        return os.path.join(self.directory, "ca.pem")

    @classmethod
    def load(cls, directory: str) -> "Identity":
        path = os.path.join(directory, "identity.json")
        try:
            with open(path, encoding="utf-8") as file:
                data: Any = json.load(file)
        except FileNotFoundError:
            raise BadIdentity(f"no identity.json in {directory}: make one with 'courier pki device-cert --out {directory}'") from None
        except (OSError, ValueError) as error:
            raise BadIdentity(f"{path} is not a device identity file ({error})") from None
        try:
            identity = cls(
                directory=directory,
                device_id=str(data["deviceID"]),
                generation=int(data["generation"]),
                host=str(data["host"]),
                production_port=int(data["productionPort"]),
                sandbox_port=int(data["sandboxPort"]),
                tokens={str(env): {str(k): str(v) for k, v in apps.items()} for env, apps in dict(data.get("tokens", {})).items()},
            )
            int(identity.device_id, 16)
        except (KeyError, TypeError, ValueError, AttributeError):
            raise BadIdentity(f"{path} is not a device identity file") from None
        for name in ("cert.pem", "key.pem", "ca.pem"):
            if not os.path.exists(os.path.join(directory, name)):
                raise BadIdentity(f"{directory} has no {name}")
        return identity

    def token(self, bundle_id: str, environment: str) -> Optional[bytes]:
        value = self.tokens.get(environment, {}).get(bundle_id)
        return bytes.fromhex(value) if value else None

    def set_token(self, bundle_id: str, environment: str, token: Optional[bytes]) -> None:
        apps = self.tokens.setdefault(environment, {})
        if token is None:
            apps.pop(bundle_id, None)
        else:
            apps[bundle_id] = token.hex()

    def tokens_in(self, environment: str) -> List[bytes]:
        return [bytes.fromhex(value) for _, value in sorted(self.tokens.get(environment, {}).items())]

    def remove_tokens(self, environment: str, refused: List[bytes]) -> None:
        apps = self.tokens.get(environment, {})
        for bundle_id in [b for b, value in apps.items() if bytes.fromhex(value) in refused]:
            del apps[bundle_id]

    def save(self) -> None:
        """Writes identity.json whole (a temporary file renamed over it)."""
        data = {
            "deviceID": self.device_id,
            "generation": self.generation,
            "host": self.host,
            "productionPort": self.production_port,
            "sandboxPort": self.sandbox_port,
            "tokens": self.tokens,
        }
        handle, temporary = tempfile.mkstemp(dir=self.directory, prefix=".identity-")
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            json.dump(data, file, indent=2, sort_keys=True)
            file.write("\n")
        os.replace(temporary, os.path.join(self.directory, "identity.json"))

    def tls_context(self) -> ssl.SSLContext:
        """TLS towards the gateway: this device's certificate, Courier's CA the only trust root."""
        context = ssl.create_default_context(cafile=self.ca_path)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.certificate_path, self.key_path)
        return context
