import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SessionMessageRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SESSION_MESSAGE_ROLE_UNSPECIFIED: _ClassVar[SessionMessageRole]
    SESSION_MESSAGE_ROLE_USER: _ClassVar[SessionMessageRole]
    SESSION_MESSAGE_ROLE_ASSISTANT: _ClassVar[SessionMessageRole]
    SESSION_MESSAGE_ROLE_TOOL: _ClassVar[SessionMessageRole]
    SESSION_MESSAGE_ROLE_SYSTEM: _ClassVar[SessionMessageRole]

class PlanStepStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PLAN_STEP_STATUS_UNSPECIFIED: _ClassVar[PlanStepStatus]
    PLAN_STEP_STATUS_PENDING: _ClassVar[PlanStepStatus]
    PLAN_STEP_STATUS_IN_PROGRESS: _ClassVar[PlanStepStatus]
    PLAN_STEP_STATUS_DONE: _ClassVar[PlanStepStatus]
    PLAN_STEP_STATUS_DROPPED: _ClassVar[PlanStepStatus]

class MemoryItemKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MEMORY_ITEM_KIND_UNSPECIFIED: _ClassVar[MemoryItemKind]
    MEMORY_ITEM_KIND_PROFILE: _ClassVar[MemoryItemKind]
    MEMORY_ITEM_KIND_INTEREST: _ClassVar[MemoryItemKind]
    MEMORY_ITEM_KIND_FACT: _ClassVar[MemoryItemKind]

class StatementForm(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STATEMENT_FORM_UNSPECIFIED: _ClassVar[StatementForm]
    STATEMENT_FORM_NONE: _ClassVar[StatementForm]
    STATEMENT_FORM_REMEMBER: _ClassVar[StatementForm]
    STATEMENT_FORM_FORGET: _ClassVar[StatementForm]
SESSION_MESSAGE_ROLE_UNSPECIFIED: SessionMessageRole
SESSION_MESSAGE_ROLE_USER: SessionMessageRole
SESSION_MESSAGE_ROLE_ASSISTANT: SessionMessageRole
SESSION_MESSAGE_ROLE_TOOL: SessionMessageRole
SESSION_MESSAGE_ROLE_SYSTEM: SessionMessageRole
PLAN_STEP_STATUS_UNSPECIFIED: PlanStepStatus
PLAN_STEP_STATUS_PENDING: PlanStepStatus
PLAN_STEP_STATUS_IN_PROGRESS: PlanStepStatus
PLAN_STEP_STATUS_DONE: PlanStepStatus
PLAN_STEP_STATUS_DROPPED: PlanStepStatus
MEMORY_ITEM_KIND_UNSPECIFIED: MemoryItemKind
MEMORY_ITEM_KIND_PROFILE: MemoryItemKind
MEMORY_ITEM_KIND_INTEREST: MemoryItemKind
MEMORY_ITEM_KIND_FACT: MemoryItemKind
STATEMENT_FORM_UNSPECIFIED: StatementForm
STATEMENT_FORM_NONE: StatementForm
STATEMENT_FORM_REMEMBER: StatementForm
STATEMENT_FORM_FORGET: StatementForm

class HandoffPhase(_message.Message):
    __slots__ = ("title", "summary")
    TITLE_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    title: str
    summary: str
    def __init__(self, title: _Optional[str] = ..., summary: _Optional[str] = ...) -> None: ...

class AbandonedPath(_message.Message):
    __slots__ = ("approach", "reason")
    APPROACH_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    approach: str
    reason: str
    def __init__(self, approach: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class StoredResultRef(_message.Message):
    __slots__ = ("ref_id", "tool_name", "summary", "message_id")
    REF_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    ref_id: str
    tool_name: str
    summary: str
    message_id: str
    def __init__(self, ref_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., summary: _Optional[str] = ..., message_id: _Optional[str] = ...) -> None: ...

class HandoffDocument(_message.Message):
    __slots__ = ("original_request", "phases_done", "abandoned_paths", "result_refs", "key_facts", "open_questions")
    ORIGINAL_REQUEST_FIELD_NUMBER: _ClassVar[int]
    PHASES_DONE_FIELD_NUMBER: _ClassVar[int]
    ABANDONED_PATHS_FIELD_NUMBER: _ClassVar[int]
    RESULT_REFS_FIELD_NUMBER: _ClassVar[int]
    KEY_FACTS_FIELD_NUMBER: _ClassVar[int]
    OPEN_QUESTIONS_FIELD_NUMBER: _ClassVar[int]
    original_request: str
    phases_done: _containers.RepeatedCompositeFieldContainer[HandoffPhase]
    abandoned_paths: _containers.RepeatedCompositeFieldContainer[AbandonedPath]
    result_refs: _containers.RepeatedCompositeFieldContainer[StoredResultRef]
    key_facts: _containers.RepeatedScalarFieldContainer[str]
    open_questions: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, original_request: _Optional[str] = ..., phases_done: _Optional[_Iterable[_Union[HandoffPhase, _Mapping]]] = ..., abandoned_paths: _Optional[_Iterable[_Union[AbandonedPath, _Mapping]]] = ..., result_refs: _Optional[_Iterable[_Union[StoredResultRef, _Mapping]]] = ..., key_facts: _Optional[_Iterable[str]] = ..., open_questions: _Optional[_Iterable[str]] = ...) -> None: ...

class SessionSummary(_message.Message):
    __slots__ = ("session_id", "handoff", "summary_upto_message_id", "revision", "trigger_prompt_tokens", "update_time")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    HANDOFF_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_UPTO_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    handoff: HandoffDocument
    summary_upto_message_id: str
    revision: int
    trigger_prompt_tokens: int
    update_time: _timestamp_pb2.Timestamp
    def __init__(self, session_id: _Optional[str] = ..., handoff: _Optional[_Union[HandoffDocument, _Mapping]] = ..., summary_upto_message_id: _Optional[str] = ..., revision: _Optional[int] = ..., trigger_prompt_tokens: _Optional[int] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GetSessionSummaryRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class GetSessionSummaryResponse(_message.Message):
    __slots__ = ("summary",)
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    summary: SessionSummary
    def __init__(self, summary: _Optional[_Union[SessionSummary, _Mapping]] = ...) -> None: ...

class PutSessionSummaryRequest(_message.Message):
    __slots__ = ("session_id", "handoff", "summary_upto_message_id", "trigger_prompt_tokens", "expected_revision")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    HANDOFF_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_UPTO_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    handoff: HandoffDocument
    summary_upto_message_id: str
    trigger_prompt_tokens: int
    expected_revision: int
    def __init__(self, session_id: _Optional[str] = ..., handoff: _Optional[_Union[HandoffDocument, _Mapping]] = ..., summary_upto_message_id: _Optional[str] = ..., trigger_prompt_tokens: _Optional[int] = ..., expected_revision: _Optional[int] = ...) -> None: ...

class PutSessionSummaryResponse(_message.Message):
    __slots__ = ("summary",)
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    summary: SessionSummary
    def __init__(self, summary: _Optional[_Union[SessionSummary, _Mapping]] = ...) -> None: ...

class SessionMessage(_message.Message):
    __slots__ = ("id", "role", "content", "tool_call_ids", "tool_call_id", "tool_name")
    ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_IDS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    id: str
    role: SessionMessageRole
    content: str
    tool_call_ids: _containers.RepeatedScalarFieldContainer[str]
    tool_call_id: str
    tool_name: str
    def __init__(self, id: _Optional[str] = ..., role: _Optional[_Union[SessionMessageRole, str]] = ..., content: _Optional[str] = ..., tool_call_ids: _Optional[_Iterable[str]] = ..., tool_call_id: _Optional[str] = ..., tool_name: _Optional[str] = ...) -> None: ...

class CompactSessionRequest(_message.Message):
    __slots__ = ("session_id", "messages", "context_window", "trigger_prompt_tokens", "model_id", "expected_revision")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_WINDOW_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    messages: _containers.RepeatedCompositeFieldContainer[SessionMessage]
    context_window: int
    trigger_prompt_tokens: int
    model_id: str
    expected_revision: int
    def __init__(self, session_id: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[SessionMessage, _Mapping]]] = ..., context_window: _Optional[int] = ..., trigger_prompt_tokens: _Optional[int] = ..., model_id: _Optional[str] = ..., expected_revision: _Optional[int] = ...) -> None: ...

class CompactSessionResponse(_message.Message):
    __slots__ = ("summary", "compacted", "degraded", "degraded_reason", "kept_tokens", "handoff_tokens")
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    COMPACTED_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_REASON_FIELD_NUMBER: _ClassVar[int]
    KEPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    HANDOFF_TOKENS_FIELD_NUMBER: _ClassVar[int]
    summary: SessionSummary
    compacted: bool
    degraded: bool
    degraded_reason: str
    kept_tokens: int
    handoff_tokens: int
    def __init__(self, summary: _Optional[_Union[SessionSummary, _Mapping]] = ..., compacted: _Optional[bool] = ..., degraded: _Optional[bool] = ..., degraded_reason: _Optional[str] = ..., kept_tokens: _Optional[int] = ..., handoff_tokens: _Optional[int] = ...) -> None: ...

class PlanStep(_message.Message):
    __slots__ = ("text", "status")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    text: str
    status: PlanStepStatus
    def __init__(self, text: _Optional[str] = ..., status: _Optional[_Union[PlanStepStatus, str]] = ...) -> None: ...

class QaPoint(_message.Message):
    __slots__ = ("turn_id", "question", "answer_gist", "time")
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    ANSWER_GIST_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    turn_id: str
    question: str
    answer_gist: str
    time: _timestamp_pb2.Timestamp
    def __init__(self, turn_id: _Optional[str] = ..., question: _Optional[str] = ..., answer_gist: _Optional[str] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class WorkingMemory(_message.Message):
    __slots__ = ("session_id", "plan", "recent_qa", "update_time")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    RECENT_QA_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    plan: _containers.RepeatedCompositeFieldContainer[PlanStep]
    recent_qa: _containers.RepeatedCompositeFieldContainer[QaPoint]
    update_time: _timestamp_pb2.Timestamp
    def __init__(self, session_id: _Optional[str] = ..., plan: _Optional[_Iterable[_Union[PlanStep, _Mapping]]] = ..., recent_qa: _Optional[_Iterable[_Union[QaPoint, _Mapping]]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GetWorkingMemoryRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class GetWorkingMemoryResponse(_message.Message):
    __slots__ = ("working_memory",)
    WORKING_MEMORY_FIELD_NUMBER: _ClassVar[int]
    working_memory: WorkingMemory
    def __init__(self, working_memory: _Optional[_Union[WorkingMemory, _Mapping]] = ...) -> None: ...

class PutWorkingMemoryRequest(_message.Message):
    __slots__ = ("session_id", "plan", "recent_qa")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    RECENT_QA_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    plan: _containers.RepeatedCompositeFieldContainer[PlanStep]
    recent_qa: _containers.RepeatedCompositeFieldContainer[QaPoint]
    def __init__(self, session_id: _Optional[str] = ..., plan: _Optional[_Iterable[_Union[PlanStep, _Mapping]]] = ..., recent_qa: _Optional[_Iterable[_Union[QaPoint, _Mapping]]] = ...) -> None: ...

class PutWorkingMemoryResponse(_message.Message):
    __slots__ = ("working_memory",)
    WORKING_MEMORY_FIELD_NUMBER: _ClassVar[int]
    working_memory: WorkingMemory
    def __init__(self, working_memory: _Optional[_Union[WorkingMemory, _Mapping]] = ...) -> None: ...

class DeleteSessionMemoryRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class DeleteSessionMemoryResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MemoryItem(_message.Message):
    __slots__ = ("id", "kind", "content", "source_session_id", "source_message_id", "create_time")
    ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    id: str
    kind: MemoryItemKind
    content: str
    source_session_id: str
    source_message_id: str
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., kind: _Optional[_Union[MemoryItemKind, str]] = ..., content: _Optional[str] = ..., source_session_id: _Optional[str] = ..., source_message_id: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class NewMemoryItem(_message.Message):
    __slots__ = ("kind", "content")
    KIND_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    kind: MemoryItemKind
    content: str
    def __init__(self, kind: _Optional[_Union[MemoryItemKind, str]] = ..., content: _Optional[str] = ...) -> None: ...

class RememberRequest(_message.Message):
    __slots__ = ("items", "session_id", "source_message_id")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[NewMemoryItem]
    session_id: str
    source_message_id: str
    def __init__(self, items: _Optional[_Iterable[_Union[NewMemoryItem, _Mapping]]] = ..., session_id: _Optional[str] = ..., source_message_id: _Optional[str] = ...) -> None: ...

class RememberedItem(_message.Message):
    __slots__ = ("item", "created")
    ITEM_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    item: MemoryItem
    created: bool
    def __init__(self, item: _Optional[_Union[MemoryItem, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class RememberResponse(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[RememberedItem]
    def __init__(self, items: _Optional[_Iterable[_Union[RememberedItem, _Mapping]]] = ...) -> None: ...

class ListMemoryItemsRequest(_message.Message):
    __slots__ = ("kinds", "page_size", "page_token")
    KINDS_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    kinds: _containers.RepeatedScalarFieldContainer[MemoryItemKind]
    page_size: int
    page_token: str
    def __init__(self, kinds: _Optional[_Iterable[_Union[MemoryItemKind, str]]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListMemoryItemsResponse(_message.Message):
    __slots__ = ("items", "next_page_token")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[MemoryItem]
    next_page_token: str
    def __init__(self, items: _Optional[_Iterable[_Union[MemoryItem, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteMemoryItemRequest(_message.Message):
    __slots__ = ("memory_item_id",)
    MEMORY_ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    memory_item_id: str
    def __init__(self, memory_item_id: _Optional[str] = ...) -> None: ...

class DeleteMemoryItemResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UpdateMemoryItemRequest(_message.Message):
    __slots__ = ("memory_item_id", "content", "kind")
    MEMORY_ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    memory_item_id: str
    content: str
    kind: MemoryItemKind
    def __init__(self, memory_item_id: _Optional[str] = ..., content: _Optional[str] = ..., kind: _Optional[_Union[MemoryItemKind, str]] = ...) -> None: ...

class UpdateMemoryItemResponse(_message.Message):
    __slots__ = ("item",)
    ITEM_FIELD_NUMBER: _ClassVar[int]
    item: MemoryItem
    def __init__(self, item: _Optional[_Union[MemoryItem, _Mapping]] = ...) -> None: ...

class ApplyStatementsRequest(_message.Message):
    __slots__ = ("text", "session_id", "source_message_id")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    text: str
    session_id: str
    source_message_id: str
    def __init__(self, text: _Optional[str] = ..., session_id: _Optional[str] = ..., source_message_id: _Optional[str] = ...) -> None: ...

class ApplyStatementsResponse(_message.Message):
    __slots__ = ("form", "remembered", "forgotten")
    FORM_FIELD_NUMBER: _ClassVar[int]
    REMEMBERED_FIELD_NUMBER: _ClassVar[int]
    FORGOTTEN_FIELD_NUMBER: _ClassVar[int]
    form: StatementForm
    remembered: _containers.RepeatedCompositeFieldContainer[RememberedItem]
    forgotten: _containers.RepeatedCompositeFieldContainer[MemoryItem]
    def __init__(self, form: _Optional[_Union[StatementForm, str]] = ..., remembered: _Optional[_Iterable[_Union[RememberedItem, _Mapping]]] = ..., forgotten: _Optional[_Iterable[_Union[MemoryItem, _Mapping]]] = ...) -> None: ...

class CitedDocument(_message.Message):
    __slots__ = ("document_id", "knowledge_base_id", "file_name")
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_BASE_ID_FIELD_NUMBER: _ClassVar[int]
    FILE_NAME_FIELD_NUMBER: _ClassVar[int]
    document_id: str
    knowledge_base_id: str
    file_name: str
    def __init__(self, document_id: _Optional[str] = ..., knowledge_base_id: _Optional[str] = ..., file_name: _Optional[str] = ...) -> None: ...

class RecordCitedDocumentsRequest(_message.Message):
    __slots__ = ("turn_id", "session_id", "documents")
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    turn_id: str
    session_id: str
    documents: _containers.RepeatedCompositeFieldContainer[CitedDocument]
    def __init__(self, turn_id: _Optional[str] = ..., session_id: _Optional[str] = ..., documents: _Optional[_Iterable[_Union[CitedDocument, _Mapping]]] = ...) -> None: ...

class RecordCitedDocumentsResponse(_message.Message):
    __slots__ = ("recorded",)
    RECORDED_FIELD_NUMBER: _ClassVar[int]
    recorded: bool
    def __init__(self, recorded: _Optional[bool] = ...) -> None: ...

class FrequentDocument(_message.Message):
    __slots__ = ("document_id", "knowledge_base_id", "file_name", "hit_count", "last_cited_time")
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_BASE_ID_FIELD_NUMBER: _ClassVar[int]
    FILE_NAME_FIELD_NUMBER: _ClassVar[int]
    HIT_COUNT_FIELD_NUMBER: _ClassVar[int]
    LAST_CITED_TIME_FIELD_NUMBER: _ClassVar[int]
    document_id: str
    knowledge_base_id: str
    file_name: str
    hit_count: int
    last_cited_time: _timestamp_pb2.Timestamp
    def __init__(self, document_id: _Optional[str] = ..., knowledge_base_id: _Optional[str] = ..., file_name: _Optional[str] = ..., hit_count: _Optional[int] = ..., last_cited_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListFrequentDocumentsRequest(_message.Message):
    __slots__ = ("min_hits", "knowledge_base_ids", "page_size", "page_token")
    MIN_HITS_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_BASE_IDS_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    min_hits: int
    knowledge_base_ids: _containers.RepeatedScalarFieldContainer[str]
    page_size: int
    page_token: str
    def __init__(self, min_hits: _Optional[int] = ..., knowledge_base_ids: _Optional[_Iterable[str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListFrequentDocumentsResponse(_message.Message):
    __slots__ = ("documents", "next_page_token")
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    documents: _containers.RepeatedCompositeFieldContainer[FrequentDocument]
    next_page_token: str
    def __init__(self, documents: _Optional[_Iterable[_Union[FrequentDocument, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetAskerBackgroundRequest(_message.Message):
    __slots__ = ("knowledge_base_ids", "language")
    KNOWLEDGE_BASE_IDS_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    knowledge_base_ids: _containers.RepeatedScalarFieldContainer[str]
    language: str
    def __init__(self, knowledge_base_ids: _Optional[_Iterable[str]] = ..., language: _Optional[str] = ...) -> None: ...

class AskerBackground(_message.Message):
    __slots__ = ("profile", "interests", "frequent_documents", "rendered")
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    INTERESTS_FIELD_NUMBER: _ClassVar[int]
    FREQUENT_DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    RENDERED_FIELD_NUMBER: _ClassVar[int]
    profile: _containers.RepeatedCompositeFieldContainer[MemoryItem]
    interests: _containers.RepeatedCompositeFieldContainer[MemoryItem]
    frequent_documents: _containers.RepeatedCompositeFieldContainer[FrequentDocument]
    rendered: str
    def __init__(self, profile: _Optional[_Iterable[_Union[MemoryItem, _Mapping]]] = ..., interests: _Optional[_Iterable[_Union[MemoryItem, _Mapping]]] = ..., frequent_documents: _Optional[_Iterable[_Union[FrequentDocument, _Mapping]]] = ..., rendered: _Optional[str] = ...) -> None: ...

class GetAskerBackgroundResponse(_message.Message):
    __slots__ = ("background",)
    BACKGROUND_FIELD_NUMBER: _ClassVar[int]
    background: AskerBackground
    def __init__(self, background: _Optional[_Union[AskerBackground, _Mapping]] = ...) -> None: ...
