"""Model-call failures: a small set of codes, each with a message for the user in their language.

The raw provider detail stays in :attr:`ModelError.detail` for logs and traces; the caller gets the
code (``ModelErrorDetail`` in the gRPC status details) and the friendly message.
"""

from __future__ import annotations

from typing import Any

import grpc

from knowsphere.modelhub.v1.modelhub_enums import ModelErrorCode
from knowsphere_telemetry.redaction import REDACTED

GRPC_STATUS: dict[ModelErrorCode, grpc.StatusCode] = {
    ModelErrorCode.IMAGE_URL_UNREACHABLE: grpc.StatusCode.INVALID_ARGUMENT,
    ModelErrorCode.RATE_LIMITED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ModelErrorCode.QUOTA_EXHAUSTED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ModelErrorCode.AUTHENTICATION_FAILED: grpc.StatusCode.FAILED_PRECONDITION,
    ModelErrorCode.TIMEOUT: grpc.StatusCode.DEADLINE_EXCEEDED,
    ModelErrorCode.MODEL_UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ModelErrorCode.CONTENT_FILTERED: grpc.StatusCode.INVALID_ARGUMENT,
    ModelErrorCode.NO_MODEL_CONFIGURED: grpc.StatusCode.FAILED_PRECONDITION,
    ModelErrorCode.WRONG_MODEL_TYPE: grpc.StatusCode.INVALID_ARGUMENT,
    ModelErrorCode.INVALID_INPUT: grpc.StatusCode.INVALID_ARGUMENT,
    ModelErrorCode.MODEL_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ModelErrorCode.PROVIDER_ERROR: grpc.StatusCode.INTERNAL,
}

# Messages for the end user. Placeholders are filled from ModelError.params.
MESSAGES: dict[ModelErrorCode, dict[str, str]] = {
    ModelErrorCode.IMAGE_URL_UNREACHABLE: {
        "en": "The image link could not be opened by the model. Use a publicly reachable image URL "
        "(one that opens in a browser without logging in), or upload the image instead.",
        "zh": "AI 模型无法访问图片链接。"
        "请使用公开可访问的图片链接（无需登录即可在浏览器中打开），或直接上传图片。",
    },
    ModelErrorCode.RATE_LIMITED: {
        "en": "The model provider is receiving too many requests right now. Please try again in a moment.",
        "zh": "模型服务当前请求过多，已被限流，请稍后再试。",
    },
    ModelErrorCode.QUOTA_EXHAUSTED: {
        "en": "The model provider account has run out of quota or balance. "
        "Ask an administrator to top it up.",
        "zh": "模型服务账户额度或余额不足，请联系管理员充值。",
    },
    ModelErrorCode.AUTHENTICATION_FAILED: {
        "en": "The model provider rejected the API key of model {model}. Ask an administrator to update it.",
        "zh": "模型服务拒绝了模型 {model} 的 API Key，请联系管理员更新。",
    },
    ModelErrorCode.TIMEOUT: {
        "en": "The model did not answer in time. Please try again.",
        "zh": "模型响应超时，请重试。",
    },
    ModelErrorCode.MODEL_UNAVAILABLE: {
        "en": "The model {model} is unavailable at the moment. Try again later or choose another model.",
        "zh": "模型 {model} 暂时不可用，请稍后再试或更换模型。",
    },
    ModelErrorCode.CONTENT_FILTERED: {
        "en": "The model provider's content safety filter rejected this request. Please rephrase it.",
        "zh": "内容未通过模型服务的安全审核，请修改后重试。",
    },
    ModelErrorCode.NO_MODEL_CONFIGURED: {
        "en": "No {type} model is configured. Add one (POST /api/v1/models) and make it the default "
        "(PUT /api/v1/models/defaults/{type}), or set KS_MODELHUB_{TYPE}_PROVIDER and "
        "KS_MODELHUB_{TYPE}_MODEL.",
        "zh": "尚未配置{type}模型。请先添加模型（POST /api/v1/models）"
        "并设为默认（PUT /api/v1/models/defaults/{type}），"
        "或设置环境变量 KS_MODELHUB_{TYPE}_PROVIDER 和 KS_MODELHUB_{TYPE}_MODEL。",
    },
    ModelErrorCode.WRONG_MODEL_TYPE: {
        "en": "Model {model} cannot be used for {type}; it is registered for {types}.",
        "zh": "模型 {model} 不支持{type}，它登记的类型是 {types}。",
    },
    ModelErrorCode.INVALID_INPUT: {
        "en": "Invalid request: {reason}",
        "zh": "请求无效：{reason}",
    },
    ModelErrorCode.MODEL_NOT_FOUND: {
        "en": "Model {model} does not exist.",
        "zh": "模型 {model} 不存在。",
    },
    ModelErrorCode.PROVIDER_ERROR: {
        "en": "The model provider returned an error. "
        "Please try again; if it persists, tell an administrator.",
        "zh": "模型服务返回错误，请重试；如持续出现，请联系管理员。",
    },
}


class ModelError(Exception):
    """A model call failed in a way the user should hear about."""

    def __init__(
        self,
        code: ModelErrorCode,
        detail: str,
        *,
        field: str = "",
        model_id: str = "",
        provider_id: str = "",
        retry_after: float | None = None,
        **params: Any,
    ) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.field = field
        self.model_id = model_id
        self.provider_id = provider_id
        self.retry_after = retry_after
        self.params = params

    @property
    def code_name(self) -> str:
        return self.code.value

    @property
    def grpc_status(self) -> grpc.StatusCode:
        return GRPC_STATUS.get(self.code, grpc.StatusCode.INTERNAL)

    def user_message(self, language: str = "en") -> str:
        table = MESSAGES.get(self.code, MESSAGES[ModelErrorCode.PROVIDER_ERROR])
        template = table["zh"] if language.lower().startswith("zh") else table["en"]
        values = {"model": self.model_id or "?", "type": "", "TYPE": "", "types": "", "reason": self.detail}
        values.update({k: str(v) for k, v in self.params.items()})
        try:
            return template.format(**values)
        except (KeyError, IndexError):
            return template

    def with_target(self, model_id: str, provider_id: str) -> ModelError:
        """The same error, stamped with the model it happened on (when the raiser did not know)."""
        self.model_id = self.model_id or model_id
        self.provider_id = self.provider_id or provider_id
        return self

    def without(self, secret: str | None) -> ModelError:
        """The same error with ``secret`` (a call's API key) replaced by ``***`` in its detail."""
        if secret and secret in self.detail:
            self.detail = self.detail.replace(secret, REDACTED)
            self.args = (self.detail,)
        return self


def invalid_input(field: str, reason: str) -> ModelError:
    """INVALID_INPUT about one field of a request; the user reads "Invalid request: <field>: <reason>"."""
    return ModelError(ModelErrorCode.INVALID_INPUT, reason, field=field, reason=f"{field}: {reason}")


def invalid_field(field: str, message: str) -> ModelError:
    """INVALID_INPUT whose ``message`` names the field itself ("display_name must be 1–200 …")."""
    return ModelError(ModelErrorCode.INVALID_INPUT, message, field=field)
