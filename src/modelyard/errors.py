"""The exceptions modelyard raises, in one hierarchy.

Every error carries a message that says what is wrong, the value that came in, and what to do.
The CLI turns a ``ModelyardError`` into one red line and exit status 1; the REST API turns it
into a JSON error body with the HTTP status given by ``http_status``.

    ModelyardError
    +-- InvalidInput          (400) a request, flag, YAML file or path that cannot be used as given
    |   +-- InvalidYaml       (400) YAML that does not parse or has the wrong shape; names the line
    |   +-- InvalidModelDirectory (400) a model directory that cannot be served
    +-- NotFound              (404) a named thing (model, deployment, backend, key) does not exist
    +-- AlreadyExists         (409) a name that is already taken
    +-- Conflict              (409) the request is valid but the current state forbids it
    +-- Unschedulable         (409) no placement exists for a deployment (names what holds the GPUs)
    +-- Unauthorized          (401) missing or wrong credentials
    +-- Forbidden             (403) credentials valid, action not allowed
    +-- PayloadTooLarge       (413) a request body over its route's limit (names the limit and its knob)
    +-- TooManyRequests       (429) throttled or over a limit; carries ``retry_after_seconds``
    +-- EngineStartFailed     (500) an engine process could not be started
    |   +-- ImagePullFailed   (500) a backend image could not be pulled (the image, the registry's answer)
    +-- StorageFull           (507) the data directory's disk (or the database) is full: nothing was written
    |   +-- InsufficientDiskSpace (507) a download or import would not fit on its target's filesystem
    +-- HubUnavailable        (502) a model hub (Hugging Face, ModelScope) could not be reached or failed
    +-- OidcError             (502) single sign-on failed at one step (the message says which, what to check)
        +-- ProviderUnreachable   (502) the provider's discovery, JWKS or token endpoint did not answer
        +-- ProviderMisconfigured (502) the provider answered with metadata or keys that cannot be used
        +-- TokenRefused          (502) the provider refused the code exchange
        +-- IdTokenRefused        (502) the ID token's signature or claims do not check out
        +-- SignInMismatch        (400) the callback does not belong to the sign-in this browser started
"""

from __future__ import annotations


class ModelyardError(Exception):
    """Base of every error modelyard raises on purpose."""

    http_status: int = 500
    code: str = "internal_error"

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message} ({self.hint})"
        return self.message


class InvalidInput(ModelyardError):
    http_status = 400
    code = "invalid_input"


class InvalidYaml(InvalidInput):
    code = "invalid_yaml"
    # Where the problem is (1-based), when known: editors mark that line.
    line: int | None = None
    column: int | None = None
    # The message without "<what> line L, column C: ", for lists that show the position beside it.
    message_without_position: str | None = None
    # Set where every problem of a document is known: {"problems": [...]} (REST error ``details``).
    details: dict[str, object] | None = None


class InvalidModelDirectory(InvalidInput):
    code = "invalid_model_directory"


class NotFound(ModelyardError):
    http_status = 404
    code = "not_found"


class AlreadyExists(ModelyardError):
    http_status = 409
    code = "already_exists"


class Conflict(ModelyardError):
    http_status = 409
    code = "conflict"


class Unschedulable(ModelyardError):
    http_status = 409
    code = "unschedulable"


class Unauthorized(ModelyardError):
    http_status = 401
    code = "unauthorized"


class Forbidden(ModelyardError):
    http_status = 403
    code = "forbidden"


class EngineStartFailed(ModelyardError):
    http_status = 500
    code = "engine_start_failed"


class ImagePullFailed(EngineStartFailed):
    code = "image_pull_failed"


class PayloadTooLarge(ModelyardError):
    http_status = 413
    code = "body_too_large"


class TooManyRequests(ModelyardError):
    """Sent with ``Retry-After: retry_after_seconds``."""

    http_status = 429
    code = "too_many_requests"

    def __init__(self, message: str, *, retry_after_seconds: int, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.retry_after_seconds = max(1, retry_after_seconds)


class StorageFull(ModelyardError):
    http_status = 507
    code = "storage_full"


class InsufficientDiskSpace(StorageFull):
    """Refused before the first byte: a download or import would not fit (with headroom)."""

    code = "insufficient_disk_space"


class HubUnavailable(ModelyardError):
    http_status = 502
    code = "hub_unavailable"


class OidcError(ModelyardError):
    """Single sign-on failed; the message says at which step and what to check."""

    http_status = 502
    code = "oidc_failed"


class ProviderUnreachable(OidcError):
    code = "oidc_provider_unreachable"


class ProviderMisconfigured(OidcError):
    code = "oidc_provider_misconfigured"


class TokenRefused(OidcError):
    code = "oidc_token_refused"


class SignInMismatch(OidcError):
    """The callback does not belong to the sign-in this browser started (state or nonce)."""

    http_status = 400
    code = "oidc_sign_in_mismatch"


class IdTokenRefused(OidcError):
    code = "oidc_id_token_refused"
