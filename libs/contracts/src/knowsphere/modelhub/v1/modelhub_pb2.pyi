import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ModelType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODEL_TYPE_UNSPECIFIED: _ClassVar[ModelType]
    MODEL_TYPE_EMBEDDING: _ClassVar[ModelType]
    MODEL_TYPE_RERANK: _ClassVar[ModelType]
    MODEL_TYPE_KNOWLEDGE_QA: _ClassVar[ModelType]
    MODEL_TYPE_VLM: _ClassVar[ModelType]
    MODEL_TYPE_ASR: _ClassVar[ModelType]

class DefaultModelSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEFAULT_MODEL_SOURCE_UNSPECIFIED: _ClassVar[DefaultModelSource]
    DEFAULT_MODEL_SOURCE_NONE: _ClassVar[DefaultModelSource]
    DEFAULT_MODEL_SOURCE_TENANT: _ClassVar[DefaultModelSource]
    DEFAULT_MODEL_SOURCE_BUILTIN: _ClassVar[DefaultModelSource]
    DEFAULT_MODEL_SOURCE_ENVIRONMENT: _ClassVar[DefaultModelSource]

class ModelConsumerKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODEL_CONSUMER_KIND_UNSPECIFIED: _ClassVar[ModelConsumerKind]
    MODEL_CONSUMER_KIND_KNOWLEDGE_BASE: _ClassVar[ModelConsumerKind]
    MODEL_CONSUMER_KIND_AGENT: _ClassVar[ModelConsumerKind]

class ImageInputFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    IMAGE_INPUT_FORMAT_UNSPECIFIED: _ClassVar[ImageInputFormat]
    IMAGE_INPUT_FORMAT_URL_OR_DATA_URL: _ClassVar[ImageInputFormat]
    IMAGE_INPUT_FORMAT_BASE64_ONLY: _ClassVar[ImageInputFormat]

class ModelErrorCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODEL_ERROR_CODE_UNSPECIFIED: _ClassVar[ModelErrorCode]
    MODEL_ERROR_CODE_IMAGE_URL_UNREACHABLE: _ClassVar[ModelErrorCode]
    MODEL_ERROR_CODE_RATE_LIMITED: _ClassVar[ModelErrorCode]
    MODEL_ERROR_CODE_QUOTA_EXHAUSTED: _ClassVar[ModelErrorCode]
    MODEL_ERROR_CODE_AUTHENTICATION_FAILED: _ClassVar[ModelErrorCode]
    MODEL_ERROR_CODE_TIMEOUT: _ClassVar[ModelErrorCode]
    MODEL_ERROR_CODE_MODEL_UNAVAILABLE: _ClassVar[ModelErrorCode]
    MODEL_ERROR_CODE_CONTENT_FILTERED: _ClassVar[ModelErrorCode]
    MODEL_ERROR_CODE_NO_MODEL_CONFIGURED: _ClassVar[ModelErrorCode]
    MODEL_ERROR_CODE_WRONG_MODEL_TYPE: _ClassVar[ModelErrorCode]
    MODEL_ERROR_CODE_INVALID_INPUT: _ClassVar[ModelErrorCode]
    MODEL_ERROR_CODE_MODEL_NOT_FOUND: _ClassVar[ModelErrorCode]
    MODEL_ERROR_CODE_PROVIDER_ERROR: _ClassVar[ModelErrorCode]

class ChatRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CHAT_ROLE_UNSPECIFIED: _ClassVar[ChatRole]
    CHAT_ROLE_SYSTEM: _ClassVar[ChatRole]
    CHAT_ROLE_USER: _ClassVar[ChatRole]
    CHAT_ROLE_ASSISTANT: _ClassVar[ChatRole]
    CHAT_ROLE_TOOL: _ClassVar[ChatRole]

class ImageDetail(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    IMAGE_DETAIL_UNSPECIFIED: _ClassVar[ImageDetail]
    IMAGE_DETAIL_AUTO: _ClassVar[ImageDetail]
    IMAGE_DETAIL_LOW: _ClassVar[ImageDetail]
    IMAGE_DETAIL_HIGH: _ClassVar[ImageDetail]

class ToolChoiceMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_CHOICE_MODE_UNSPECIFIED: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_AUTO: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_NONE: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_REQUIRED: _ClassVar[ToolChoiceMode]

class ResponseFormatType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESPONSE_FORMAT_TYPE_UNSPECIFIED: _ClassVar[ResponseFormatType]
    RESPONSE_FORMAT_TYPE_TEXT: _ClassVar[ResponseFormatType]
    RESPONSE_FORMAT_TYPE_JSON_OBJECT: _ClassVar[ResponseFormatType]
    RESPONSE_FORMAT_TYPE_JSON_SCHEMA: _ClassVar[ResponseFormatType]

class FinishReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FINISH_REASON_UNSPECIFIED: _ClassVar[FinishReason]
    FINISH_REASON_STOP: _ClassVar[FinishReason]
    FINISH_REASON_LENGTH: _ClassVar[FinishReason]
    FINISH_REASON_TOOL_CALLS: _ClassVar[FinishReason]
    FINISH_REASON_CONTENT_FILTER: _ClassVar[FinishReason]

class DecisionMethod(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DECISION_METHOD_UNSPECIFIED: _ClassVar[DecisionMethod]
    DECISION_METHOD_LOGPROBS: _ClassVar[DecisionMethod]
    DECISION_METHOD_JSON: _ClassVar[DecisionMethod]

class EmbedInputType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EMBED_INPUT_TYPE_UNSPECIFIED: _ClassVar[EmbedInputType]
    EMBED_INPUT_TYPE_QUERY: _ClassVar[EmbedInputType]
    EMBED_INPUT_TYPE_DOCUMENT: _ClassVar[EmbedInputType]
MODEL_TYPE_UNSPECIFIED: ModelType
MODEL_TYPE_EMBEDDING: ModelType
MODEL_TYPE_RERANK: ModelType
MODEL_TYPE_KNOWLEDGE_QA: ModelType
MODEL_TYPE_VLM: ModelType
MODEL_TYPE_ASR: ModelType
DEFAULT_MODEL_SOURCE_UNSPECIFIED: DefaultModelSource
DEFAULT_MODEL_SOURCE_NONE: DefaultModelSource
DEFAULT_MODEL_SOURCE_TENANT: DefaultModelSource
DEFAULT_MODEL_SOURCE_BUILTIN: DefaultModelSource
DEFAULT_MODEL_SOURCE_ENVIRONMENT: DefaultModelSource
MODEL_CONSUMER_KIND_UNSPECIFIED: ModelConsumerKind
MODEL_CONSUMER_KIND_KNOWLEDGE_BASE: ModelConsumerKind
MODEL_CONSUMER_KIND_AGENT: ModelConsumerKind
IMAGE_INPUT_FORMAT_UNSPECIFIED: ImageInputFormat
IMAGE_INPUT_FORMAT_URL_OR_DATA_URL: ImageInputFormat
IMAGE_INPUT_FORMAT_BASE64_ONLY: ImageInputFormat
MODEL_ERROR_CODE_UNSPECIFIED: ModelErrorCode
MODEL_ERROR_CODE_IMAGE_URL_UNREACHABLE: ModelErrorCode
MODEL_ERROR_CODE_RATE_LIMITED: ModelErrorCode
MODEL_ERROR_CODE_QUOTA_EXHAUSTED: ModelErrorCode
MODEL_ERROR_CODE_AUTHENTICATION_FAILED: ModelErrorCode
MODEL_ERROR_CODE_TIMEOUT: ModelErrorCode
MODEL_ERROR_CODE_MODEL_UNAVAILABLE: ModelErrorCode
MODEL_ERROR_CODE_CONTENT_FILTERED: ModelErrorCode
MODEL_ERROR_CODE_NO_MODEL_CONFIGURED: ModelErrorCode
MODEL_ERROR_CODE_WRONG_MODEL_TYPE: ModelErrorCode
MODEL_ERROR_CODE_INVALID_INPUT: ModelErrorCode
MODEL_ERROR_CODE_MODEL_NOT_FOUND: ModelErrorCode
MODEL_ERROR_CODE_PROVIDER_ERROR: ModelErrorCode
CHAT_ROLE_UNSPECIFIED: ChatRole
CHAT_ROLE_SYSTEM: ChatRole
CHAT_ROLE_USER: ChatRole
CHAT_ROLE_ASSISTANT: ChatRole
CHAT_ROLE_TOOL: ChatRole
IMAGE_DETAIL_UNSPECIFIED: ImageDetail
IMAGE_DETAIL_AUTO: ImageDetail
IMAGE_DETAIL_LOW: ImageDetail
IMAGE_DETAIL_HIGH: ImageDetail
TOOL_CHOICE_MODE_UNSPECIFIED: ToolChoiceMode
TOOL_CHOICE_MODE_AUTO: ToolChoiceMode
TOOL_CHOICE_MODE_NONE: ToolChoiceMode
TOOL_CHOICE_MODE_REQUIRED: ToolChoiceMode
RESPONSE_FORMAT_TYPE_UNSPECIFIED: ResponseFormatType
RESPONSE_FORMAT_TYPE_TEXT: ResponseFormatType
RESPONSE_FORMAT_TYPE_JSON_OBJECT: ResponseFormatType
RESPONSE_FORMAT_TYPE_JSON_SCHEMA: ResponseFormatType
FINISH_REASON_UNSPECIFIED: FinishReason
FINISH_REASON_STOP: FinishReason
FINISH_REASON_LENGTH: FinishReason
FINISH_REASON_TOOL_CALLS: FinishReason
FINISH_REASON_CONTENT_FILTER: FinishReason
DECISION_METHOD_UNSPECIFIED: DecisionMethod
DECISION_METHOD_LOGPROBS: DecisionMethod
DECISION_METHOD_JSON: DecisionMethod
EMBED_INPUT_TYPE_UNSPECIFIED: EmbedInputType
EMBED_INPUT_TYPE_QUERY: EmbedInputType
EMBED_INPUT_TYPE_DOCUMENT: EmbedInputType

class ModelParameters(_message.Message):
    __slots__ = ("temperature", "max_tokens", "context_window", "embedding_dimension", "extra")
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_WINDOW_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_DIMENSION_FIELD_NUMBER: _ClassVar[int]
    EXTRA_FIELD_NUMBER: _ClassVar[int]
    temperature: float
    max_tokens: int
    context_window: int
    embedding_dimension: int
    extra: _struct_pb2.Struct
    def __init__(self, temperature: _Optional[float] = ..., max_tokens: _Optional[int] = ..., context_window: _Optional[int] = ..., embedding_dimension: _Optional[int] = ..., extra: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class Model(_message.Message):
    __slots__ = ("id", "display_name", "provider_id", "model_name", "types", "base_url", "parameters", "api_key_hint", "builtin", "tenant_id", "default_for", "create_time", "update_time", "description")
    ID_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    TYPES_FIELD_NUMBER: _ClassVar[int]
    BASE_URL_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    API_KEY_HINT_FIELD_NUMBER: _ClassVar[int]
    BUILTIN_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_FOR_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    id: str
    display_name: str
    provider_id: str
    model_name: str
    types: _containers.RepeatedScalarFieldContainer[ModelType]
    base_url: str
    parameters: ModelParameters
    api_key_hint: str
    builtin: bool
    tenant_id: str
    default_for: _containers.RepeatedScalarFieldContainer[ModelType]
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    description: str
    def __init__(self, id: _Optional[str] = ..., display_name: _Optional[str] = ..., provider_id: _Optional[str] = ..., model_name: _Optional[str] = ..., types: _Optional[_Iterable[_Union[ModelType, str]]] = ..., base_url: _Optional[str] = ..., parameters: _Optional[_Union[ModelParameters, _Mapping]] = ..., api_key_hint: _Optional[str] = ..., builtin: _Optional[bool] = ..., tenant_id: _Optional[str] = ..., default_for: _Optional[_Iterable[_Union[ModelType, str]]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., description: _Optional[str] = ...) -> None: ...

class CreateModelRequest(_message.Message):
    __slots__ = ("display_name", "provider_id", "model_name", "types", "base_url", "parameters", "api_key", "description")
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    TYPES_FIELD_NUMBER: _ClassVar[int]
    BASE_URL_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    API_KEY_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    display_name: str
    provider_id: str
    model_name: str
    types: _containers.RepeatedScalarFieldContainer[ModelType]
    base_url: str
    parameters: ModelParameters
    api_key: str
    description: str
    def __init__(self, display_name: _Optional[str] = ..., provider_id: _Optional[str] = ..., model_name: _Optional[str] = ..., types: _Optional[_Iterable[_Union[ModelType, str]]] = ..., base_url: _Optional[str] = ..., parameters: _Optional[_Union[ModelParameters, _Mapping]] = ..., api_key: _Optional[str] = ..., description: _Optional[str] = ...) -> None: ...

class CreateModelResponse(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: Model
    def __init__(self, model: _Optional[_Union[Model, _Mapping]] = ...) -> None: ...

class GetModelRequest(_message.Message):
    __slots__ = ("model_id",)
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    def __init__(self, model_id: _Optional[str] = ...) -> None: ...

class GetModelResponse(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: Model
    def __init__(self, model: _Optional[_Union[Model, _Mapping]] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ("type", "provider_id", "page_size", "page_token")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    type: ModelType
    provider_id: str
    page_size: int
    page_token: str
    def __init__(self, type: _Optional[_Union[ModelType, str]] = ..., provider_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models", "next_page_token")
    MODELS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[Model]
    next_page_token: str
    def __init__(self, models: _Optional[_Iterable[_Union[Model, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ModelTypeList(_message.Message):
    __slots__ = ("types",)
    TYPES_FIELD_NUMBER: _ClassVar[int]
    types: _containers.RepeatedScalarFieldContainer[ModelType]
    def __init__(self, types: _Optional[_Iterable[_Union[ModelType, str]]] = ...) -> None: ...

class UpdateModelRequest(_message.Message):
    __slots__ = ("model_id", "display_name", "model_name", "types", "base_url", "parameters", "api_key", "description")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    TYPES_FIELD_NUMBER: _ClassVar[int]
    BASE_URL_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    API_KEY_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    display_name: str
    model_name: str
    types: ModelTypeList
    base_url: str
    parameters: ModelParameters
    api_key: str
    description: str
    def __init__(self, model_id: _Optional[str] = ..., display_name: _Optional[str] = ..., model_name: _Optional[str] = ..., types: _Optional[_Union[ModelTypeList, _Mapping]] = ..., base_url: _Optional[str] = ..., parameters: _Optional[_Union[ModelParameters, _Mapping]] = ..., api_key: _Optional[str] = ..., description: _Optional[str] = ...) -> None: ...

class UpdateModelResponse(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: Model
    def __init__(self, model: _Optional[_Union[Model, _Mapping]] = ...) -> None: ...

class DeleteModelRequest(_message.Message):
    __slots__ = ("model_id",)
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    def __init__(self, model_id: _Optional[str] = ...) -> None: ...

class DeleteModelResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SetDefaultModelRequest(_message.Message):
    __slots__ = ("type", "model_id")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    type: ModelType
    model_id: str
    def __init__(self, type: _Optional[_Union[ModelType, str]] = ..., model_id: _Optional[str] = ...) -> None: ...

class SetDefaultModelResponse(_message.Message):
    __slots__ = ("default_model",)
    DEFAULT_MODEL_FIELD_NUMBER: _ClassVar[int]
    default_model: ResolvedDefault
    def __init__(self, default_model: _Optional[_Union[ResolvedDefault, _Mapping]] = ...) -> None: ...

class ResolvedDefault(_message.Message):
    __slots__ = ("type", "model", "source")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    type: ModelType
    model: Model
    source: DefaultModelSource
    def __init__(self, type: _Optional[_Union[ModelType, str]] = ..., model: _Optional[_Union[Model, _Mapping]] = ..., source: _Optional[_Union[DefaultModelSource, str]] = ...) -> None: ...

class GetDefaultModelRequest(_message.Message):
    __slots__ = ("type",)
    TYPE_FIELD_NUMBER: _ClassVar[int]
    type: ModelType
    def __init__(self, type: _Optional[_Union[ModelType, str]] = ...) -> None: ...

class GetDefaultModelResponse(_message.Message):
    __slots__ = ("default_model",)
    DEFAULT_MODEL_FIELD_NUMBER: _ClassVar[int]
    default_model: ResolvedDefault
    def __init__(self, default_model: _Optional[_Union[ResolvedDefault, _Mapping]] = ...) -> None: ...

class ModelUsage(_message.Message):
    __slots__ = ("model_id", "consumer_kind", "consumer_id", "consumer_name", "create_time")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_KIND_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_NAME_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    consumer_kind: ModelConsumerKind
    consumer_id: str
    consumer_name: str
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, model_id: _Optional[str] = ..., consumer_kind: _Optional[_Union[ModelConsumerKind, str]] = ..., consumer_id: _Optional[str] = ..., consumer_name: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class PutModelUsageRequest(_message.Message):
    __slots__ = ("model_id", "consumer_kind", "consumer_id", "consumer_name")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_KIND_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_NAME_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    consumer_kind: ModelConsumerKind
    consumer_id: str
    consumer_name: str
    def __init__(self, model_id: _Optional[str] = ..., consumer_kind: _Optional[_Union[ModelConsumerKind, str]] = ..., consumer_id: _Optional[str] = ..., consumer_name: _Optional[str] = ...) -> None: ...

class PutModelUsageResponse(_message.Message):
    __slots__ = ("usage",)
    USAGE_FIELD_NUMBER: _ClassVar[int]
    usage: ModelUsage
    def __init__(self, usage: _Optional[_Union[ModelUsage, _Mapping]] = ...) -> None: ...

class DeleteModelUsageRequest(_message.Message):
    __slots__ = ("model_id", "consumer_kind", "consumer_id")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_KIND_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    consumer_kind: ModelConsumerKind
    consumer_id: str
    def __init__(self, model_id: _Optional[str] = ..., consumer_kind: _Optional[_Union[ModelConsumerKind, str]] = ..., consumer_id: _Optional[str] = ...) -> None: ...

class DeleteModelUsageResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListModelUsagesRequest(_message.Message):
    __slots__ = ("model_id", "page_size", "page_token")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    page_size: int
    page_token: str
    def __init__(self, model_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListModelUsagesResponse(_message.Message):
    __slots__ = ("usages", "next_page_token")
    USAGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    usages: _containers.RepeatedCompositeFieldContainer[ModelUsage]
    next_page_token: str
    def __init__(self, usages: _Optional[_Iterable[_Union[ModelUsage, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ProviderCapabilities(_message.Message):
    __slots__ = ("model_types", "logprobs", "cache_breakpoints", "cached_token_usage", "tool_calls", "json_schema_output", "image_input", "local", "requires_api_key", "openai_compatible")
    MODEL_TYPES_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    CACHE_BREAKPOINTS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKEN_USAGE_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    JSON_SCHEMA_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_INPUT_FIELD_NUMBER: _ClassVar[int]
    LOCAL_FIELD_NUMBER: _ClassVar[int]
    REQUIRES_API_KEY_FIELD_NUMBER: _ClassVar[int]
    OPENAI_COMPATIBLE_FIELD_NUMBER: _ClassVar[int]
    model_types: _containers.RepeatedScalarFieldContainer[ModelType]
    logprobs: bool
    cache_breakpoints: bool
    cached_token_usage: bool
    tool_calls: bool
    json_schema_output: bool
    image_input: ImageInputFormat
    local: bool
    requires_api_key: bool
    openai_compatible: bool
    def __init__(self, model_types: _Optional[_Iterable[_Union[ModelType, str]]] = ..., logprobs: _Optional[bool] = ..., cache_breakpoints: _Optional[bool] = ..., cached_token_usage: _Optional[bool] = ..., tool_calls: _Optional[bool] = ..., json_schema_output: _Optional[bool] = ..., image_input: _Optional[_Union[ImageInputFormat, str]] = ..., local: _Optional[bool] = ..., requires_api_key: _Optional[bool] = ..., openai_compatible: _Optional[bool] = ...) -> None: ...

class Provider(_message.Message):
    __slots__ = ("id", "display_name", "default_base_url", "capabilities", "docs_url")
    ID_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_BASE_URL_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    DOCS_URL_FIELD_NUMBER: _ClassVar[int]
    id: str
    display_name: str
    default_base_url: str
    capabilities: ProviderCapabilities
    docs_url: str
    def __init__(self, id: _Optional[str] = ..., display_name: _Optional[str] = ..., default_base_url: _Optional[str] = ..., capabilities: _Optional[_Union[ProviderCapabilities, _Mapping]] = ..., docs_url: _Optional[str] = ...) -> None: ...

class ListProvidersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListProvidersResponse(_message.Message):
    __slots__ = ("providers",)
    PROVIDERS_FIELD_NUMBER: _ClassVar[int]
    providers: _containers.RepeatedCompositeFieldContainer[Provider]
    def __init__(self, providers: _Optional[_Iterable[_Union[Provider, _Mapping]]] = ...) -> None: ...

class ModelErrorDetail(_message.Message):
    __slots__ = ("code", "user_message", "language", "model_id", "provider_id", "field", "retry_after")
    CODE_FIELD_NUMBER: _ClassVar[int]
    USER_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_ID_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    code: ModelErrorCode
    user_message: str
    language: str
    model_id: str
    provider_id: str
    field: str
    retry_after: _duration_pb2.Duration
    def __init__(self, code: _Optional[_Union[ModelErrorCode, str]] = ..., user_message: _Optional[str] = ..., language: _Optional[str] = ..., model_id: _Optional[str] = ..., provider_id: _Optional[str] = ..., field: _Optional[str] = ..., retry_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ImageInput(_message.Message):
    __slots__ = ("url", "data", "mime_type", "detail")
    URL_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    url: str
    data: bytes
    mime_type: str
    detail: ImageDetail
    def __init__(self, url: _Optional[str] = ..., data: _Optional[bytes] = ..., mime_type: _Optional[str] = ..., detail: _Optional[_Union[ImageDetail, str]] = ...) -> None: ...

class ContentPart(_message.Message):
    __slots__ = ("text", "image")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    text: str
    image: ImageInput
    def __init__(self, text: _Optional[str] = ..., image: _Optional[_Union[ImageInput, _Mapping]] = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ("id", "name", "arguments_json")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    arguments_json: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., arguments_json: _Optional[str] = ...) -> None: ...

class ChatMessage(_message.Message):
    __slots__ = ("role", "content", "tool_calls", "tool_call_id", "name", "cache_breakpoint")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    CACHE_BREAKPOINT_FIELD_NUMBER: _ClassVar[int]
    role: ChatRole
    content: _containers.RepeatedCompositeFieldContainer[ContentPart]
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    tool_call_id: str
    name: str
    cache_breakpoint: bool
    def __init__(self, role: _Optional[_Union[ChatRole, str]] = ..., content: _Optional[_Iterable[_Union[ContentPart, _Mapping]]] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ..., tool_call_id: _Optional[str] = ..., name: _Optional[str] = ..., cache_breakpoint: _Optional[bool] = ...) -> None: ...

class ToolDefinition(_message.Message):
    __slots__ = ("name", "description", "parameters_json_schema", "strict")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_JSON_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    STRICT_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    parameters_json_schema: str
    strict: bool
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., parameters_json_schema: _Optional[str] = ..., strict: _Optional[bool] = ...) -> None: ...

class ToolChoice(_message.Message):
    __slots__ = ("mode", "tool_name")
    MODE_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    mode: ToolChoiceMode
    tool_name: str
    def __init__(self, mode: _Optional[_Union[ToolChoiceMode, str]] = ..., tool_name: _Optional[str] = ...) -> None: ...

class ResponseFormat(_message.Message):
    __slots__ = ("type", "schema_name", "json_schema", "strict")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_NAME_FIELD_NUMBER: _ClassVar[int]
    JSON_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    STRICT_FIELD_NUMBER: _ClassVar[int]
    type: ResponseFormatType
    schema_name: str
    json_schema: str
    strict: bool
    def __init__(self, type: _Optional[_Union[ResponseFormatType, str]] = ..., schema_name: _Optional[str] = ..., json_schema: _Optional[str] = ..., strict: _Optional[bool] = ...) -> None: ...

class ChatStreamRequest(_message.Message):
    __slots__ = ("model_id", "messages", "tools", "tool_choice", "response_format", "temperature", "max_tokens", "stop", "provider_params", "purpose", "include_reasoning")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FORMAT_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_PARAMS_FIELD_NUMBER: _ClassVar[int]
    PURPOSE_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_REASONING_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    messages: _containers.RepeatedCompositeFieldContainer[ChatMessage]
    tools: _containers.RepeatedCompositeFieldContainer[ToolDefinition]
    tool_choice: ToolChoice
    response_format: ResponseFormat
    temperature: float
    max_tokens: int
    stop: _containers.RepeatedScalarFieldContainer[str]
    provider_params: _struct_pb2.Struct
    purpose: str
    include_reasoning: bool
    def __init__(self, model_id: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[ChatMessage, _Mapping]]] = ..., tools: _Optional[_Iterable[_Union[ToolDefinition, _Mapping]]] = ..., tool_choice: _Optional[_Union[ToolChoice, _Mapping]] = ..., response_format: _Optional[_Union[ResponseFormat, _Mapping]] = ..., temperature: _Optional[float] = ..., max_tokens: _Optional[int] = ..., stop: _Optional[_Iterable[str]] = ..., provider_params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., purpose: _Optional[str] = ..., include_reasoning: _Optional[bool] = ...) -> None: ...

class ChatStarted(_message.Message):
    __slots__ = ("model_id", "provider_id", "model_name", "context_window")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_WINDOW_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    provider_id: str
    model_name: str
    context_window: int
    def __init__(self, model_id: _Optional[str] = ..., provider_id: _Optional[str] = ..., model_name: _Optional[str] = ..., context_window: _Optional[int] = ...) -> None: ...

class TextDelta(_message.Message):
    __slots__ = ("text",)
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class ReasoningDelta(_message.Message):
    __slots__ = ("text",)
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class ToolCallDelta(_message.Message):
    __slots__ = ("index", "id", "name", "arguments_delta")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_DELTA_FIELD_NUMBER: _ClassVar[int]
    index: int
    id: str
    name: str
    arguments_delta: str
    def __init__(self, index: _Optional[int] = ..., id: _Optional[str] = ..., name: _Optional[str] = ..., arguments_delta: _Optional[str] = ...) -> None: ...

class ChatFinish(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: FinishReason
    def __init__(self, reason: _Optional[_Union[FinishReason, str]] = ...) -> None: ...

class TokenUsage(_message.Message):
    __slots__ = ("prompt_tokens", "completion_tokens", "total_tokens", "cached_prompt_tokens", "reasoning_tokens")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REASONING_TOKENS_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cached_prompt_tokens: int
    reasoning_tokens: int
    def __init__(self, prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., total_tokens: _Optional[int] = ..., cached_prompt_tokens: _Optional[int] = ..., reasoning_tokens: _Optional[int] = ...) -> None: ...

class ChatStreamResponse(_message.Message):
    __slots__ = ("started", "text_delta", "reasoning_delta", "tool_call_delta", "finish", "usage")
    STARTED_FIELD_NUMBER: _ClassVar[int]
    TEXT_DELTA_FIELD_NUMBER: _ClassVar[int]
    REASONING_DELTA_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_DELTA_FIELD_NUMBER: _ClassVar[int]
    FINISH_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    started: ChatStarted
    text_delta: TextDelta
    reasoning_delta: ReasoningDelta
    tool_call_delta: ToolCallDelta
    finish: ChatFinish
    usage: TokenUsage
    def __init__(self, started: _Optional[_Union[ChatStarted, _Mapping]] = ..., text_delta: _Optional[_Union[TextDelta, _Mapping]] = ..., reasoning_delta: _Optional[_Union[ReasoningDelta, _Mapping]] = ..., tool_call_delta: _Optional[_Union[ToolCallDelta, _Mapping]] = ..., finish: _Optional[_Union[ChatFinish, _Mapping]] = ..., usage: _Optional[_Union[TokenUsage, _Mapping]] = ...) -> None: ...

class DecisionLabel(_message.Message):
    __slots__ = ("name", "description")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ...) -> None: ...

class DecideRequest(_message.Message):
    __slots__ = ("model_id", "messages", "prompt", "labels", "method", "purpose")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    PURPOSE_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    messages: _containers.RepeatedCompositeFieldContainer[ChatMessage]
    prompt: str
    labels: _containers.RepeatedCompositeFieldContainer[DecisionLabel]
    method: DecisionMethod
    purpose: str
    def __init__(self, model_id: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[ChatMessage, _Mapping]]] = ..., prompt: _Optional[str] = ..., labels: _Optional[_Iterable[_Union[DecisionLabel, _Mapping]]] = ..., method: _Optional[_Union[DecisionMethod, str]] = ..., purpose: _Optional[str] = ...) -> None: ...

class LabelProbability(_message.Message):
    __slots__ = ("label", "probability")
    LABEL_FIELD_NUMBER: _ClassVar[int]
    PROBABILITY_FIELD_NUMBER: _ClassVar[int]
    label: str
    probability: float
    def __init__(self, label: _Optional[str] = ..., probability: _Optional[float] = ...) -> None: ...

class DecideResponse(_message.Message):
    __slots__ = ("label", "probability", "method", "scores", "model_id", "usage")
    LABEL_FIELD_NUMBER: _ClassVar[int]
    PROBABILITY_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    SCORES_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    label: str
    probability: float
    method: DecisionMethod
    scores: _containers.RepeatedCompositeFieldContainer[LabelProbability]
    model_id: str
    usage: TokenUsage
    def __init__(self, label: _Optional[str] = ..., probability: _Optional[float] = ..., method: _Optional[_Union[DecisionMethod, str]] = ..., scores: _Optional[_Iterable[_Union[LabelProbability, _Mapping]]] = ..., model_id: _Optional[str] = ..., usage: _Optional[_Union[TokenUsage, _Mapping]] = ...) -> None: ...

class EmbedRequest(_message.Message):
    __slots__ = ("model_id", "texts", "input_type")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    INPUT_TYPE_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    texts: _containers.RepeatedScalarFieldContainer[str]
    input_type: EmbedInputType
    def __init__(self, model_id: _Optional[str] = ..., texts: _Optional[_Iterable[str]] = ..., input_type: _Optional[_Union[EmbedInputType, str]] = ...) -> None: ...

class Embedding(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, values: _Optional[_Iterable[float]] = ...) -> None: ...

class EmbedResponse(_message.Message):
    __slots__ = ("embeddings", "model_id", "dimension", "usage")
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    embeddings: _containers.RepeatedCompositeFieldContainer[Embedding]
    model_id: str
    dimension: int
    usage: TokenUsage
    def __init__(self, embeddings: _Optional[_Iterable[_Union[Embedding, _Mapping]]] = ..., model_id: _Optional[str] = ..., dimension: _Optional[int] = ..., usage: _Optional[_Union[TokenUsage, _Mapping]] = ...) -> None: ...

class RerankRequest(_message.Message):
    __slots__ = ("model_id", "query", "documents", "top_n")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    TOP_N_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    query: str
    documents: _containers.RepeatedScalarFieldContainer[str]
    top_n: int
    def __init__(self, model_id: _Optional[str] = ..., query: _Optional[str] = ..., documents: _Optional[_Iterable[str]] = ..., top_n: _Optional[int] = ...) -> None: ...

class RerankResult(_message.Message):
    __slots__ = ("index", "relevance_score")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    RELEVANCE_SCORE_FIELD_NUMBER: _ClassVar[int]
    index: int
    relevance_score: float
    def __init__(self, index: _Optional[int] = ..., relevance_score: _Optional[float] = ...) -> None: ...

class RerankResponse(_message.Message):
    __slots__ = ("results", "model_id", "usage")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[RerankResult]
    model_id: str
    usage: TokenUsage
    def __init__(self, results: _Optional[_Iterable[_Union[RerankResult, _Mapping]]] = ..., model_id: _Optional[str] = ..., usage: _Optional[_Union[TokenUsage, _Mapping]] = ...) -> None: ...

class DescribeImageRequest(_message.Message):
    __slots__ = ("model_id", "image", "prompt", "language", "max_tokens", "purpose")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PURPOSE_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    image: ImageInput
    prompt: str
    language: str
    max_tokens: int
    purpose: str
    def __init__(self, model_id: _Optional[str] = ..., image: _Optional[_Union[ImageInput, _Mapping]] = ..., prompt: _Optional[str] = ..., language: _Optional[str] = ..., max_tokens: _Optional[int] = ..., purpose: _Optional[str] = ...) -> None: ...

class DescribeImageResponse(_message.Message):
    __slots__ = ("description", "model_id", "usage")
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    description: str
    model_id: str
    usage: TokenUsage
    def __init__(self, description: _Optional[str] = ..., model_id: _Optional[str] = ..., usage: _Optional[_Union[TokenUsage, _Mapping]] = ...) -> None: ...

class TranscribeRequest(_message.Message):
    __slots__ = ("model_id", "audio", "mime_type", "file_name", "language", "prompt", "include_segments")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    FILE_NAME_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    audio: bytes
    mime_type: str
    file_name: str
    language: str
    prompt: str
    include_segments: bool
    def __init__(self, model_id: _Optional[str] = ..., audio: _Optional[bytes] = ..., mime_type: _Optional[str] = ..., file_name: _Optional[str] = ..., language: _Optional[str] = ..., prompt: _Optional[str] = ..., include_segments: _Optional[bool] = ...) -> None: ...

class TranscriptSegment(_message.Message):
    __slots__ = ("start", "end", "text")
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    start: _duration_pb2.Duration
    end: _duration_pb2.Duration
    text: str
    def __init__(self, start: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., end: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., text: _Optional[str] = ...) -> None: ...

class TranscribeResponse(_message.Message):
    __slots__ = ("text", "language", "duration", "segments", "model_id")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    text: str
    language: str
    duration: _duration_pb2.Duration
    segments: _containers.RepeatedCompositeFieldContainer[TranscriptSegment]
    model_id: str
    def __init__(self, text: _Optional[str] = ..., language: _Optional[str] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., segments: _Optional[_Iterable[_Union[TranscriptSegment, _Mapping]]] = ..., model_id: _Optional[str] = ...) -> None: ...
