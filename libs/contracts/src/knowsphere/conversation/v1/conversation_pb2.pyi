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

class MessageRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MESSAGE_ROLE_UNSPECIFIED: _ClassVar[MessageRole]
    MESSAGE_ROLE_USER: _ClassVar[MessageRole]
    MESSAGE_ROLE_ASSISTANT: _ClassVar[MessageRole]
    MESSAGE_ROLE_TOOL: _ClassVar[MessageRole]

class MessageStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MESSAGE_STATUS_UNSPECIFIED: _ClassVar[MessageStatus]
    MESSAGE_STATUS_IN_PROGRESS: _ClassVar[MessageStatus]
    MESSAGE_STATUS_COMPLETED: _ClassVar[MessageStatus]
    MESSAGE_STATUS_CANCELLED: _ClassVar[MessageStatus]
    MESSAGE_STATUS_FAILED: _ClassVar[MessageStatus]

class Intent(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INTENT_UNSPECIFIED: _ClassVar[Intent]
    INTENT_GREETING: _ClassVar[Intent]
    INTENT_CHITCHAT: _ClassVar[Intent]
    INTENT_IMAGE_ONLY: _ClassVar[Intent]
    INTENT_DOC_ONLY: _ClassVar[Intent]
    INTENT_KB_SEARCH: _ClassVar[Intent]
    INTENT_CLARIFICATION: _ClassVar[Intent]
    INTENT_SUMMARIZE: _ClassVar[Intent]
    INTENT_WEB_SEARCH: _ClassVar[Intent]

class TurnRoute(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TURN_ROUTE_UNSPECIFIED: _ClassVar[TurnRoute]
    TURN_ROUTE_GENERATE: _ClassVar[TurnRoute]
    TURN_ROUTE_REACT: _ClassVar[TurnRoute]
    TURN_ROUTE_RETRIEVE: _ClassVar[TurnRoute]

class DecisionMethod(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DECISION_METHOD_UNSPECIFIED: _ClassVar[DecisionMethod]
    DECISION_METHOD_LOGPROBS: _ClassVar[DecisionMethod]
    DECISION_METHOD_JSON: _ClassVar[DecisionMethod]

class TurnOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TURN_OUTCOME_UNSPECIFIED: _ClassVar[TurnOutcome]
    TURN_OUTCOME_COMPLETED: _ClassVar[TurnOutcome]
    TURN_OUTCOME_CANCELLED: _ClassVar[TurnOutcome]
    TURN_OUTCOME_LENGTH: _ClassVar[TurnOutcome]

class TurnErrorCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TURN_ERROR_CODE_UNSPECIFIED: _ClassVar[TurnErrorCode]
    TURN_ERROR_CODE_IMAGE_URL_UNREACHABLE: _ClassVar[TurnErrorCode]
    TURN_ERROR_CODE_RATE_LIMITED: _ClassVar[TurnErrorCode]
    TURN_ERROR_CODE_QUOTA_EXHAUSTED: _ClassVar[TurnErrorCode]
    TURN_ERROR_CODE_AUTHENTICATION_FAILED: _ClassVar[TurnErrorCode]
    TURN_ERROR_CODE_TIMEOUT: _ClassVar[TurnErrorCode]
    TURN_ERROR_CODE_MODEL_UNAVAILABLE: _ClassVar[TurnErrorCode]
    TURN_ERROR_CODE_CONTENT_FILTERED: _ClassVar[TurnErrorCode]
    TURN_ERROR_CODE_NO_MODEL_CONFIGURED: _ClassVar[TurnErrorCode]
    TURN_ERROR_CODE_INVALID_INPUT: _ClassVar[TurnErrorCode]
    TURN_ERROR_CODE_SERVICE_UNAVAILABLE: _ClassVar[TurnErrorCode]
    TURN_ERROR_CODE_INTERNAL: _ClassVar[TurnErrorCode]

class OrchestrationMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ORCHESTRATION_MODE_UNSPECIFIED: _ClassVar[OrchestrationMode]
    ORCHESTRATION_MODE_SINGLE: _ClassVar[OrchestrationMode]
    ORCHESTRATION_MODE_SUPERVISOR: _ClassVar[OrchestrationMode]
    ORCHESTRATION_MODE_COLLABORATION: _ClassVar[OrchestrationMode]
    ORCHESTRATION_MODE_WORKFLOW: _ClassVar[OrchestrationMode]
    ORCHESTRATION_MODE_CONDITIONAL: _ClassVar[OrchestrationMode]
    ORCHESTRATION_MODE_EXTERNAL: _ClassVar[OrchestrationMode]
    ORCHESTRATION_MODE_DEEP_AGENT: _ClassVar[OrchestrationMode]
    ORCHESTRATION_MODE_KNOWLEDGE_BASE: _ClassVar[OrchestrationMode]
MESSAGE_ROLE_UNSPECIFIED: MessageRole
MESSAGE_ROLE_USER: MessageRole
MESSAGE_ROLE_ASSISTANT: MessageRole
MESSAGE_ROLE_TOOL: MessageRole
MESSAGE_STATUS_UNSPECIFIED: MessageStatus
MESSAGE_STATUS_IN_PROGRESS: MessageStatus
MESSAGE_STATUS_COMPLETED: MessageStatus
MESSAGE_STATUS_CANCELLED: MessageStatus
MESSAGE_STATUS_FAILED: MessageStatus
INTENT_UNSPECIFIED: Intent
INTENT_GREETING: Intent
INTENT_CHITCHAT: Intent
INTENT_IMAGE_ONLY: Intent
INTENT_DOC_ONLY: Intent
INTENT_KB_SEARCH: Intent
INTENT_CLARIFICATION: Intent
INTENT_SUMMARIZE: Intent
INTENT_WEB_SEARCH: Intent
TURN_ROUTE_UNSPECIFIED: TurnRoute
TURN_ROUTE_GENERATE: TurnRoute
TURN_ROUTE_REACT: TurnRoute
TURN_ROUTE_RETRIEVE: TurnRoute
DECISION_METHOD_UNSPECIFIED: DecisionMethod
DECISION_METHOD_LOGPROBS: DecisionMethod
DECISION_METHOD_JSON: DecisionMethod
TURN_OUTCOME_UNSPECIFIED: TurnOutcome
TURN_OUTCOME_COMPLETED: TurnOutcome
TURN_OUTCOME_CANCELLED: TurnOutcome
TURN_OUTCOME_LENGTH: TurnOutcome
TURN_ERROR_CODE_UNSPECIFIED: TurnErrorCode
TURN_ERROR_CODE_IMAGE_URL_UNREACHABLE: TurnErrorCode
TURN_ERROR_CODE_RATE_LIMITED: TurnErrorCode
TURN_ERROR_CODE_QUOTA_EXHAUSTED: TurnErrorCode
TURN_ERROR_CODE_AUTHENTICATION_FAILED: TurnErrorCode
TURN_ERROR_CODE_TIMEOUT: TurnErrorCode
TURN_ERROR_CODE_MODEL_UNAVAILABLE: TurnErrorCode
TURN_ERROR_CODE_CONTENT_FILTERED: TurnErrorCode
TURN_ERROR_CODE_NO_MODEL_CONFIGURED: TurnErrorCode
TURN_ERROR_CODE_INVALID_INPUT: TurnErrorCode
TURN_ERROR_CODE_SERVICE_UNAVAILABLE: TurnErrorCode
TURN_ERROR_CODE_INTERNAL: TurnErrorCode
ORCHESTRATION_MODE_UNSPECIFIED: OrchestrationMode
ORCHESTRATION_MODE_SINGLE: OrchestrationMode
ORCHESTRATION_MODE_SUPERVISOR: OrchestrationMode
ORCHESTRATION_MODE_COLLABORATION: OrchestrationMode
ORCHESTRATION_MODE_WORKFLOW: OrchestrationMode
ORCHESTRATION_MODE_CONDITIONAL: OrchestrationMode
ORCHESTRATION_MODE_EXTERNAL: OrchestrationMode
ORCHESTRATION_MODE_DEEP_AGENT: OrchestrationMode
ORCHESTRATION_MODE_KNOWLEDGE_BASE: OrchestrationMode

class StringList(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, values: _Optional[_Iterable[str]] = ...) -> None: ...

class Session(_message.Message):
    __slots__ = ("id", "title", "orchestrator_id", "agent_id", "application_id", "turn_count", "create_time", "update_time", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    ORCHESTRATOR_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    APPLICATION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_COUNT_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    id: str
    title: str
    orchestrator_id: str
    agent_id: str
    application_id: str
    turn_count: int
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, id: _Optional[str] = ..., title: _Optional[str] = ..., orchestrator_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., application_id: _Optional[str] = ..., turn_count: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CreateSessionRequest(_message.Message):
    __slots__ = ("title", "orchestrator_id", "agent_id", "application_id", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TITLE_FIELD_NUMBER: _ClassVar[int]
    ORCHESTRATOR_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    APPLICATION_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    title: str
    orchestrator_id: str
    agent_id: str
    application_id: str
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, title: _Optional[str] = ..., orchestrator_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., application_id: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CreateSessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: Session
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ...) -> None: ...

class GetSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class GetSessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: Session
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ...) -> None: ...

class ListSessionsRequest(_message.Message):
    __slots__ = ("orchestrator_id", "agent_id", "application_id", "page_size", "page_token")
    ORCHESTRATOR_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    APPLICATION_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    orchestrator_id: str
    agent_id: str
    application_id: str
    page_size: int
    page_token: str
    def __init__(self, orchestrator_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., application_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListSessionsResponse(_message.Message):
    __slots__ = ("sessions", "next_page_token")
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[Session]
    next_page_token: str
    def __init__(self, sessions: _Optional[_Iterable[_Union[Session, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class UpdateSessionRequest(_message.Message):
    __slots__ = ("session_id", "title")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    title: str
    def __init__(self, session_id: _Optional[str] = ..., title: _Optional[str] = ...) -> None: ...

class UpdateSessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: Session
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ...) -> None: ...

class DeleteSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class DeleteSessionResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ImagePart(_message.Message):
    __slots__ = ("url", "data", "mime_type")
    URL_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    url: str
    data: bytes
    mime_type: str
    def __init__(self, url: _Optional[str] = ..., data: _Optional[bytes] = ..., mime_type: _Optional[str] = ...) -> None: ...

class FilePart(_message.Message):
    __slots__ = ("document_id", "knowledge_base_id", "file_name", "content_type")
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_BASE_ID_FIELD_NUMBER: _ClassVar[int]
    FILE_NAME_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    document_id: str
    knowledge_base_id: str
    file_name: str
    content_type: str
    def __init__(self, document_id: _Optional[str] = ..., knowledge_base_id: _Optional[str] = ..., file_name: _Optional[str] = ..., content_type: _Optional[str] = ...) -> None: ...

class ContentPart(_message.Message):
    __slots__ = ("text", "image", "file")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    text: str
    image: ImagePart
    file: FilePart
    def __init__(self, text: _Optional[str] = ..., image: _Optional[_Union[ImagePart, _Mapping]] = ..., file: _Optional[_Union[FilePart, _Mapping]] = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ("id", "name", "arguments_json")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    arguments_json: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., arguments_json: _Optional[str] = ...) -> None: ...

class Citation(_message.Message):
    __slots__ = ("label", "index", "chunk_id", "document_id", "file_name", "knowledge_base_id", "url", "title", "snippet", "page", "heading_path")
    LABEL_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    CHUNK_ID_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    FILE_NAME_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_BASE_ID_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    SNIPPET_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    HEADING_PATH_FIELD_NUMBER: _ClassVar[int]
    label: str
    index: int
    chunk_id: str
    document_id: str
    file_name: str
    knowledge_base_id: str
    url: str
    title: str
    snippet: str
    page: int
    heading_path: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, label: _Optional[str] = ..., index: _Optional[int] = ..., chunk_id: _Optional[str] = ..., document_id: _Optional[str] = ..., file_name: _Optional[str] = ..., knowledge_base_id: _Optional[str] = ..., url: _Optional[str] = ..., title: _Optional[str] = ..., snippet: _Optional[str] = ..., page: _Optional[int] = ..., heading_path: _Optional[_Iterable[str]] = ...) -> None: ...

class TokenUsage(_message.Message):
    __slots__ = ("prompt_tokens", "completion_tokens", "total_tokens", "cached_prompt_tokens")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cached_prompt_tokens: int
    def __init__(self, prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., total_tokens: _Optional[int] = ..., cached_prompt_tokens: _Optional[int] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ("id", "session_id", "turn_id", "role", "content", "tool_calls", "tool_call_id", "tool_name", "citations", "agent_id", "usage", "status", "create_time")
    ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    CITATIONS_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    id: str
    session_id: str
    turn_id: str
    role: MessageRole
    content: _containers.RepeatedCompositeFieldContainer[ContentPart]
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    tool_call_id: str
    tool_name: str
    citations: _containers.RepeatedCompositeFieldContainer[Citation]
    agent_id: str
    usage: TokenUsage
    status: MessageStatus
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., session_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., role: _Optional[_Union[MessageRole, str]] = ..., content: _Optional[_Iterable[_Union[ContentPart, _Mapping]]] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ..., tool_call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., citations: _Optional[_Iterable[_Union[Citation, _Mapping]]] = ..., agent_id: _Optional[str] = ..., usage: _Optional[_Union[TokenUsage, _Mapping]] = ..., status: _Optional[_Union[MessageStatus, str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListMessagesRequest(_message.Message):
    __slots__ = ("session_id", "oldest_first", "include_tool_messages", "page_size", "page_token")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    OLDEST_FIRST_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_TOOL_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    oldest_first: bool
    include_tool_messages: bool
    page_size: int
    page_token: str
    def __init__(self, session_id: _Optional[str] = ..., oldest_first: _Optional[bool] = ..., include_tool_messages: _Optional[bool] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListMessagesResponse(_message.Message):
    __slots__ = ("messages", "next_page_token")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    next_page_token: str
    def __init__(self, messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class TurnOptions(_message.Message):
    __slots__ = ("knowledge_base_ids", "web_search", "knowledge_graph", "language", "skill_names")
    KNOWLEDGE_BASE_IDS_FIELD_NUMBER: _ClassVar[int]
    WEB_SEARCH_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_GRAPH_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    SKILL_NAMES_FIELD_NUMBER: _ClassVar[int]
    knowledge_base_ids: _containers.RepeatedScalarFieldContainer[str]
    web_search: bool
    knowledge_graph: bool
    language: str
    skill_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, knowledge_base_ids: _Optional[_Iterable[str]] = ..., web_search: _Optional[bool] = ..., knowledge_graph: _Optional[bool] = ..., language: _Optional[str] = ..., skill_names: _Optional[_Iterable[str]] = ...) -> None: ...

class ChatRequest(_message.Message):
    __slots__ = ("session_id", "content", "options", "turn_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    content: _containers.RepeatedCompositeFieldContainer[ContentPart]
    options: TurnOptions
    turn_id: str
    def __init__(self, session_id: _Optional[str] = ..., content: _Optional[_Iterable[_Union[ContentPart, _Mapping]]] = ..., options: _Optional[_Union[TurnOptions, _Mapping]] = ..., turn_id: _Optional[str] = ...) -> None: ...

class TurnStarted(_message.Message):
    __slots__ = ("session_id", "user_message_id", "orchestrator_id", "agent_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    USER_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    ORCHESTRATOR_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    user_message_id: str
    orchestrator_id: str
    agent_id: str
    def __init__(self, session_id: _Optional[str] = ..., user_message_id: _Optional[str] = ..., orchestrator_id: _Optional[str] = ..., agent_id: _Optional[str] = ...) -> None: ...

class IntentDecided(_message.Message):
    __slots__ = ("intent", "route", "probability", "rewritten_query", "image_description", "decision_method")
    INTENT_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    PROBABILITY_FIELD_NUMBER: _ClassVar[int]
    REWRITTEN_QUERY_FIELD_NUMBER: _ClassVar[int]
    IMAGE_DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    DECISION_METHOD_FIELD_NUMBER: _ClassVar[int]
    intent: Intent
    route: TurnRoute
    probability: float
    rewritten_query: str
    image_description: str
    decision_method: DecisionMethod
    def __init__(self, intent: _Optional[_Union[Intent, str]] = ..., route: _Optional[_Union[TurnRoute, str]] = ..., probability: _Optional[float] = ..., rewritten_query: _Optional[str] = ..., image_description: _Optional[str] = ..., decision_method: _Optional[_Union[DecisionMethod, str]] = ...) -> None: ...

class ToolCallStarted(_message.Message):
    __slots__ = ("tool_call_id", "tool_name", "arguments", "agent_id")
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    tool_call_id: str
    tool_name: str
    arguments: _struct_pb2.Struct
    agent_id: str
    def __init__(self, tool_call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., agent_id: _Optional[str] = ...) -> None: ...

class ToolCallFinished(_message.Message):
    __slots__ = ("tool_call_id", "tool_name", "ok", "error_message", "stored", "ref_id", "degraded", "attempts", "source_count", "duration")
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    REF_ID_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_COUNT_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    tool_call_id: str
    tool_name: str
    ok: bool
    error_message: str
    stored: bool
    ref_id: str
    degraded: bool
    attempts: int
    source_count: int
    duration: _duration_pb2.Duration
    def __init__(self, tool_call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., ok: _Optional[bool] = ..., error_message: _Optional[str] = ..., stored: _Optional[bool] = ..., ref_id: _Optional[str] = ..., degraded: _Optional[bool] = ..., attempts: _Optional[int] = ..., source_count: _Optional[int] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class TextDelta(_message.Message):
    __slots__ = ("text", "agent_id")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    text: str
    agent_id: str
    def __init__(self, text: _Optional[str] = ..., agent_id: _Optional[str] = ...) -> None: ...

class ReasoningDelta(_message.Message):
    __slots__ = ("text", "agent_id")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    text: str
    agent_id: str
    def __init__(self, text: _Optional[str] = ..., agent_id: _Optional[str] = ...) -> None: ...

class CitationsAdded(_message.Message):
    __slots__ = ("citations",)
    CITATIONS_FIELD_NUMBER: _ClassVar[int]
    citations: _containers.RepeatedCompositeFieldContainer[Citation]
    def __init__(self, citations: _Optional[_Iterable[_Union[Citation, _Mapping]]] = ...) -> None: ...

class UsageReported(_message.Message):
    __slots__ = ("model_id", "purpose", "usage")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    PURPOSE_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    purpose: str
    usage: TokenUsage
    def __init__(self, model_id: _Optional[str] = ..., purpose: _Optional[str] = ..., usage: _Optional[_Union[TokenUsage, _Mapping]] = ...) -> None: ...

class AgentHandoff(_message.Message):
    __slots__ = ("from_agent_id", "to_agent_id", "reason")
    FROM_AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    TO_AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    from_agent_id: str
    to_agent_id: str
    reason: str
    def __init__(self, from_agent_id: _Optional[str] = ..., to_agent_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class TurnCompleted(_message.Message):
    __slots__ = ("assistant_message_id", "outcome", "text", "cited", "total_usage", "duration", "compacted")
    ASSISTANT_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CITED_FIELD_NUMBER: _ClassVar[int]
    TOTAL_USAGE_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    COMPACTED_FIELD_NUMBER: _ClassVar[int]
    assistant_message_id: str
    outcome: TurnOutcome
    text: str
    cited: _containers.RepeatedCompositeFieldContainer[Citation]
    total_usage: TokenUsage
    duration: _duration_pb2.Duration
    compacted: bool
    def __init__(self, assistant_message_id: _Optional[str] = ..., outcome: _Optional[_Union[TurnOutcome, str]] = ..., text: _Optional[str] = ..., cited: _Optional[_Iterable[_Union[Citation, _Mapping]]] = ..., total_usage: _Optional[_Union[TokenUsage, _Mapping]] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., compacted: _Optional[bool] = ...) -> None: ...

class TurnFailed(_message.Message):
    __slots__ = ("code", "user_message", "retryable", "trace_id")
    CODE_FIELD_NUMBER: _ClassVar[int]
    USER_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    code: TurnErrorCode
    user_message: str
    retryable: bool
    trace_id: str
    def __init__(self, code: _Optional[_Union[TurnErrorCode, str]] = ..., user_message: _Optional[str] = ..., retryable: _Optional[bool] = ..., trace_id: _Optional[str] = ...) -> None: ...

class ChatResponse(_message.Message):
    __slots__ = ("turn_id", "sequence", "time", "turn_started", "intent_decided", "tool_call_started", "tool_call_finished", "text_delta", "reasoning_delta", "citations_added", "usage", "agent_handoff", "turn_completed", "turn_failed")
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    TURN_STARTED_FIELD_NUMBER: _ClassVar[int]
    INTENT_DECIDED_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_STARTED_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_FINISHED_FIELD_NUMBER: _ClassVar[int]
    TEXT_DELTA_FIELD_NUMBER: _ClassVar[int]
    REASONING_DELTA_FIELD_NUMBER: _ClassVar[int]
    CITATIONS_ADDED_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    AGENT_HANDOFF_FIELD_NUMBER: _ClassVar[int]
    TURN_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    TURN_FAILED_FIELD_NUMBER: _ClassVar[int]
    turn_id: str
    sequence: int
    time: _timestamp_pb2.Timestamp
    turn_started: TurnStarted
    intent_decided: IntentDecided
    tool_call_started: ToolCallStarted
    tool_call_finished: ToolCallFinished
    text_delta: TextDelta
    reasoning_delta: ReasoningDelta
    citations_added: CitationsAdded
    usage: UsageReported
    agent_handoff: AgentHandoff
    turn_completed: TurnCompleted
    turn_failed: TurnFailed
    def __init__(self, turn_id: _Optional[str] = ..., sequence: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., turn_started: _Optional[_Union[TurnStarted, _Mapping]] = ..., intent_decided: _Optional[_Union[IntentDecided, _Mapping]] = ..., tool_call_started: _Optional[_Union[ToolCallStarted, _Mapping]] = ..., tool_call_finished: _Optional[_Union[ToolCallFinished, _Mapping]] = ..., text_delta: _Optional[_Union[TextDelta, _Mapping]] = ..., reasoning_delta: _Optional[_Union[ReasoningDelta, _Mapping]] = ..., citations_added: _Optional[_Union[CitationsAdded, _Mapping]] = ..., usage: _Optional[_Union[UsageReported, _Mapping]] = ..., agent_handoff: _Optional[_Union[AgentHandoff, _Mapping]] = ..., turn_completed: _Optional[_Union[TurnCompleted, _Mapping]] = ..., turn_failed: _Optional[_Union[TurnFailed, _Mapping]] = ...) -> None: ...

class CancelTurnRequest(_message.Message):
    __slots__ = ("session_id", "turn_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    turn_id: str
    def __init__(self, session_id: _Optional[str] = ..., turn_id: _Optional[str] = ...) -> None: ...

class CancelTurnResponse(_message.Message):
    __slots__ = ("cancelled",)
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    cancelled: bool
    def __init__(self, cancelled: _Optional[bool] = ...) -> None: ...

class AgentModelParameters(_message.Message):
    __slots__ = ("temperature", "max_tokens")
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    temperature: float
    max_tokens: int
    def __init__(self, temperature: _Optional[float] = ..., max_tokens: _Optional[int] = ...) -> None: ...

class Agent(_message.Message):
    __slots__ = ("id", "name", "display_name", "description", "system_prompt", "model_id", "model_parameters", "tool_names", "knowledge_base_ids", "skill_names", "active", "create_time", "update_time", "model_types")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROMPT_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAMES_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_BASE_IDS_FIELD_NUMBER: _ClassVar[int]
    SKILL_NAMES_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    MODEL_TYPES_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    display_name: str
    description: str
    system_prompt: str
    model_id: str
    model_parameters: AgentModelParameters
    tool_names: _containers.RepeatedScalarFieldContainer[str]
    knowledge_base_ids: _containers.RepeatedScalarFieldContainer[str]
    skill_names: _containers.RepeatedScalarFieldContainer[str]
    active: bool
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    model_types: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., display_name: _Optional[str] = ..., description: _Optional[str] = ..., system_prompt: _Optional[str] = ..., model_id: _Optional[str] = ..., model_parameters: _Optional[_Union[AgentModelParameters, _Mapping]] = ..., tool_names: _Optional[_Iterable[str]] = ..., knowledge_base_ids: _Optional[_Iterable[str]] = ..., skill_names: _Optional[_Iterable[str]] = ..., active: _Optional[bool] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., model_types: _Optional[_Iterable[str]] = ...) -> None: ...

class CreateAgentRequest(_message.Message):
    __slots__ = ("name", "display_name", "description", "system_prompt", "model_id", "model_parameters", "tool_names", "knowledge_base_ids", "skill_names", "active", "model_types")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROMPT_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAMES_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_BASE_IDS_FIELD_NUMBER: _ClassVar[int]
    SKILL_NAMES_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    MODEL_TYPES_FIELD_NUMBER: _ClassVar[int]
    name: str
    display_name: str
    description: str
    system_prompt: str
    model_id: str
    model_parameters: AgentModelParameters
    tool_names: _containers.RepeatedScalarFieldContainer[str]
    knowledge_base_ids: _containers.RepeatedScalarFieldContainer[str]
    skill_names: _containers.RepeatedScalarFieldContainer[str]
    active: bool
    model_types: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., display_name: _Optional[str] = ..., description: _Optional[str] = ..., system_prompt: _Optional[str] = ..., model_id: _Optional[str] = ..., model_parameters: _Optional[_Union[AgentModelParameters, _Mapping]] = ..., tool_names: _Optional[_Iterable[str]] = ..., knowledge_base_ids: _Optional[_Iterable[str]] = ..., skill_names: _Optional[_Iterable[str]] = ..., active: _Optional[bool] = ..., model_types: _Optional[_Iterable[str]] = ...) -> None: ...

class CreateAgentResponse(_message.Message):
    __slots__ = ("agent",)
    AGENT_FIELD_NUMBER: _ClassVar[int]
    agent: Agent
    def __init__(self, agent: _Optional[_Union[Agent, _Mapping]] = ...) -> None: ...

class GetAgentRequest(_message.Message):
    __slots__ = ("agent_id",)
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    def __init__(self, agent_id: _Optional[str] = ...) -> None: ...

class GetAgentResponse(_message.Message):
    __slots__ = ("agent",)
    AGENT_FIELD_NUMBER: _ClassVar[int]
    agent: Agent
    def __init__(self, agent: _Optional[_Union[Agent, _Mapping]] = ...) -> None: ...

class ListAgentsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListAgentsResponse(_message.Message):
    __slots__ = ("agents", "next_page_token")
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    agents: _containers.RepeatedCompositeFieldContainer[Agent]
    next_page_token: str
    def __init__(self, agents: _Optional[_Iterable[_Union[Agent, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class UpdateAgentRequest(_message.Message):
    __slots__ = ("agent_id", "name", "display_name", "description", "system_prompt", "model_id", "model_parameters", "tool_names", "knowledge_base_ids", "skill_names", "active", "model_types")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROMPT_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAMES_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_BASE_IDS_FIELD_NUMBER: _ClassVar[int]
    SKILL_NAMES_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    MODEL_TYPES_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    name: str
    display_name: str
    description: str
    system_prompt: str
    model_id: str
    model_parameters: AgentModelParameters
    tool_names: StringList
    knowledge_base_ids: StringList
    skill_names: StringList
    active: bool
    model_types: StringList
    def __init__(self, agent_id: _Optional[str] = ..., name: _Optional[str] = ..., display_name: _Optional[str] = ..., description: _Optional[str] = ..., system_prompt: _Optional[str] = ..., model_id: _Optional[str] = ..., model_parameters: _Optional[_Union[AgentModelParameters, _Mapping]] = ..., tool_names: _Optional[_Union[StringList, _Mapping]] = ..., knowledge_base_ids: _Optional[_Union[StringList, _Mapping]] = ..., skill_names: _Optional[_Union[StringList, _Mapping]] = ..., active: _Optional[bool] = ..., model_types: _Optional[_Union[StringList, _Mapping]] = ...) -> None: ...

class UpdateAgentResponse(_message.Message):
    __slots__ = ("agent",)
    AGENT_FIELD_NUMBER: _ClassVar[int]
    agent: Agent
    def __init__(self, agent: _Optional[_Union[Agent, _Mapping]] = ...) -> None: ...

class DeleteAgentRequest(_message.Message):
    __slots__ = ("agent_id",)
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    def __init__(self, agent_id: _Optional[str] = ...) -> None: ...

class DeleteAgentResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Orchestrator(_message.Message):
    __slots__ = ("id", "name", "display_name", "description", "mode", "member_agent_ids", "config", "active", "create_time", "update_time")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    MEMBER_AGENT_IDS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    display_name: str
    description: str
    mode: OrchestrationMode
    member_agent_ids: _containers.RepeatedScalarFieldContainer[str]
    config: _struct_pb2.Struct
    active: bool
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., display_name: _Optional[str] = ..., description: _Optional[str] = ..., mode: _Optional[_Union[OrchestrationMode, str]] = ..., member_agent_ids: _Optional[_Iterable[str]] = ..., config: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., active: _Optional[bool] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CreateOrchestratorRequest(_message.Message):
    __slots__ = ("name", "display_name", "description", "mode", "member_agent_ids", "config", "active")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    MEMBER_AGENT_IDS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    name: str
    display_name: str
    description: str
    mode: OrchestrationMode
    member_agent_ids: _containers.RepeatedScalarFieldContainer[str]
    config: _struct_pb2.Struct
    active: bool
    def __init__(self, name: _Optional[str] = ..., display_name: _Optional[str] = ..., description: _Optional[str] = ..., mode: _Optional[_Union[OrchestrationMode, str]] = ..., member_agent_ids: _Optional[_Iterable[str]] = ..., config: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., active: _Optional[bool] = ...) -> None: ...

class CreateOrchestratorResponse(_message.Message):
    __slots__ = ("orchestrator",)
    ORCHESTRATOR_FIELD_NUMBER: _ClassVar[int]
    orchestrator: Orchestrator
    def __init__(self, orchestrator: _Optional[_Union[Orchestrator, _Mapping]] = ...) -> None: ...

class GetOrchestratorRequest(_message.Message):
    __slots__ = ("orchestrator_id",)
    ORCHESTRATOR_ID_FIELD_NUMBER: _ClassVar[int]
    orchestrator_id: str
    def __init__(self, orchestrator_id: _Optional[str] = ...) -> None: ...

class GetOrchestratorResponse(_message.Message):
    __slots__ = ("orchestrator",)
    ORCHESTRATOR_FIELD_NUMBER: _ClassVar[int]
    orchestrator: Orchestrator
    def __init__(self, orchestrator: _Optional[_Union[Orchestrator, _Mapping]] = ...) -> None: ...

class ListOrchestratorsRequest(_message.Message):
    __slots__ = ("mode", "page_size", "page_token")
    MODE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    mode: OrchestrationMode
    page_size: int
    page_token: str
    def __init__(self, mode: _Optional[_Union[OrchestrationMode, str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListOrchestratorsResponse(_message.Message):
    __slots__ = ("orchestrators", "next_page_token")
    ORCHESTRATORS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    orchestrators: _containers.RepeatedCompositeFieldContainer[Orchestrator]
    next_page_token: str
    def __init__(self, orchestrators: _Optional[_Iterable[_Union[Orchestrator, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class UpdateOrchestratorRequest(_message.Message):
    __slots__ = ("orchestrator_id", "name", "display_name", "description", "mode", "member_agent_ids", "config", "active")
    ORCHESTRATOR_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    MEMBER_AGENT_IDS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    orchestrator_id: str
    name: str
    display_name: str
    description: str
    mode: OrchestrationMode
    member_agent_ids: StringList
    config: _struct_pb2.Struct
    active: bool
    def __init__(self, orchestrator_id: _Optional[str] = ..., name: _Optional[str] = ..., display_name: _Optional[str] = ..., description: _Optional[str] = ..., mode: _Optional[_Union[OrchestrationMode, str]] = ..., member_agent_ids: _Optional[_Union[StringList, _Mapping]] = ..., config: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., active: _Optional[bool] = ...) -> None: ...

class UpdateOrchestratorResponse(_message.Message):
    __slots__ = ("orchestrator",)
    ORCHESTRATOR_FIELD_NUMBER: _ClassVar[int]
    orchestrator: Orchestrator
    def __init__(self, orchestrator: _Optional[_Union[Orchestrator, _Mapping]] = ...) -> None: ...

class DeleteOrchestratorRequest(_message.Message):
    __slots__ = ("orchestrator_id",)
    ORCHESTRATOR_ID_FIELD_NUMBER: _ClassVar[int]
    orchestrator_id: str
    def __init__(self, orchestrator_id: _Optional[str] = ...) -> None: ...

class DeleteOrchestratorResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
