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

class ToolCategory(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_CATEGORY_UNSPECIFIED: _ClassVar[ToolCategory]
    TOOL_CATEGORY_PLANNING: _ClassVar[ToolCategory]
    TOOL_CATEGORY_KNOWLEDGE_BASE: _ClassVar[ToolCategory]
    TOOL_CATEGORY_WEB: _ClassVar[ToolCategory]
    TOOL_CATEGORY_GENERATION: _ClassVar[ToolCategory]
    TOOL_CATEGORY_RUNTIME: _ClassVar[ToolCategory]

class SourceKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SOURCE_KIND_UNSPECIFIED: _ClassVar[SourceKind]
    SOURCE_KIND_CHUNK: _ClassVar[SourceKind]
    SOURCE_KIND_WEB: _ClassVar[SourceKind]

class ToolErrorCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_ERROR_CODE_UNSPECIFIED: _ClassVar[ToolErrorCode]
    TOOL_ERROR_CODE_UNKNOWN_TOOL: _ClassVar[ToolErrorCode]
    TOOL_ERROR_CODE_INVALID_ARGUMENTS: _ClassVar[ToolErrorCode]
    TOOL_ERROR_CODE_UNAVAILABLE_THIS_TURN: _ClassVar[ToolErrorCode]
    TOOL_ERROR_CODE_FAILED: _ClassVar[ToolErrorCode]
    TOOL_ERROR_CODE_TIMED_OUT: _ClassVar[ToolErrorCode]
    TOOL_ERROR_CODE_NOT_FOUND: _ClassVar[ToolErrorCode]

class ContentFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONTENT_FORMAT_UNSPECIFIED: _ClassVar[ContentFormat]
    CONTENT_FORMAT_JSON: _ClassVar[ContentFormat]
    CONTENT_FORMAT_TEXT: _ClassVar[ContentFormat]
TOOL_CATEGORY_UNSPECIFIED: ToolCategory
TOOL_CATEGORY_PLANNING: ToolCategory
TOOL_CATEGORY_KNOWLEDGE_BASE: ToolCategory
TOOL_CATEGORY_WEB: ToolCategory
TOOL_CATEGORY_GENERATION: ToolCategory
TOOL_CATEGORY_RUNTIME: ToolCategory
SOURCE_KIND_UNSPECIFIED: SourceKind
SOURCE_KIND_CHUNK: SourceKind
SOURCE_KIND_WEB: SourceKind
TOOL_ERROR_CODE_UNSPECIFIED: ToolErrorCode
TOOL_ERROR_CODE_UNKNOWN_TOOL: ToolErrorCode
TOOL_ERROR_CODE_INVALID_ARGUMENTS: ToolErrorCode
TOOL_ERROR_CODE_UNAVAILABLE_THIS_TURN: ToolErrorCode
TOOL_ERROR_CODE_FAILED: ToolErrorCode
TOOL_ERROR_CODE_TIMED_OUT: ToolErrorCode
TOOL_ERROR_CODE_NOT_FOUND: ToolErrorCode
CONTENT_FORMAT_UNSPECIFIED: ContentFormat
CONTENT_FORMAT_JSON: ContentFormat
CONTENT_FORMAT_TEXT: ContentFormat

class TurnSwitches(_message.Message):
    __slots__ = ("knowledge_base_ids", "web_search", "knowledge_graph")
    KNOWLEDGE_BASE_IDS_FIELD_NUMBER: _ClassVar[int]
    WEB_SEARCH_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_GRAPH_FIELD_NUMBER: _ClassVar[int]
    knowledge_base_ids: _containers.RepeatedScalarFieldContainer[str]
    web_search: bool
    knowledge_graph: bool
    def __init__(self, knowledge_base_ids: _Optional[_Iterable[str]] = ..., web_search: _Optional[bool] = ..., knowledge_graph: _Optional[bool] = ...) -> None: ...

class ToolSpec(_message.Message):
    __slots__ = ("name", "display_name", "description", "parameters_json_schema", "category", "selectable", "produces_sources")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_JSON_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    CATEGORY_FIELD_NUMBER: _ClassVar[int]
    SELECTABLE_FIELD_NUMBER: _ClassVar[int]
    PRODUCES_SOURCES_FIELD_NUMBER: _ClassVar[int]
    name: str
    display_name: str
    description: str
    parameters_json_schema: str
    category: ToolCategory
    selectable: bool
    produces_sources: bool
    def __init__(self, name: _Optional[str] = ..., display_name: _Optional[str] = ..., description: _Optional[str] = ..., parameters_json_schema: _Optional[str] = ..., category: _Optional[_Union[ToolCategory, str]] = ..., selectable: _Optional[bool] = ..., produces_sources: _Optional[bool] = ...) -> None: ...

class OmittedTool(_message.Message):
    __slots__ = ("name", "reason")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    name: str
    reason: str
    def __init__(self, name: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ListToolsRequest(_message.Message):
    __slots__ = ("switches", "tool_names", "skill_names", "catalog_view", "workspace")
    SWITCHES_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAMES_FIELD_NUMBER: _ClassVar[int]
    SKILL_NAMES_FIELD_NUMBER: _ClassVar[int]
    CATALOG_VIEW_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    switches: TurnSwitches
    tool_names: _containers.RepeatedScalarFieldContainer[str]
    skill_names: _containers.RepeatedScalarFieldContainer[str]
    catalog_view: bool
    workspace: bool
    def __init__(self, switches: _Optional[_Union[TurnSwitches, _Mapping]] = ..., tool_names: _Optional[_Iterable[str]] = ..., skill_names: _Optional[_Iterable[str]] = ..., catalog_view: _Optional[bool] = ..., workspace: _Optional[bool] = ...) -> None: ...

class ListToolsResponse(_message.Message):
    __slots__ = ("tools", "omitted")
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    OMITTED_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[ToolSpec]
    omitted: _containers.RepeatedCompositeFieldContainer[OmittedTool]
    def __init__(self, tools: _Optional[_Iterable[_Union[ToolSpec, _Mapping]]] = ..., omitted: _Optional[_Iterable[_Union[OmittedTool, _Mapping]]] = ...) -> None: ...

class Source(_message.Message):
    __slots__ = ("label", "index", "kind", "handle", "chunk_id", "document_id", "file_name", "knowledge_base_id", "url", "title", "snippet")
    LABEL_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    CHUNK_ID_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    FILE_NAME_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_BASE_ID_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    SNIPPET_FIELD_NUMBER: _ClassVar[int]
    label: str
    index: int
    kind: SourceKind
    handle: str
    chunk_id: str
    document_id: str
    file_name: str
    knowledge_base_id: str
    url: str
    title: str
    snippet: str
    def __init__(self, label: _Optional[str] = ..., index: _Optional[int] = ..., kind: _Optional[_Union[SourceKind, str]] = ..., handle: _Optional[str] = ..., chunk_id: _Optional[str] = ..., document_id: _Optional[str] = ..., file_name: _Optional[str] = ..., knowledge_base_id: _Optional[str] = ..., url: _Optional[str] = ..., title: _Optional[str] = ..., snippet: _Optional[str] = ...) -> None: ...

class ToolContext(_message.Message):
    __slots__ = ("session_id", "turn_id", "switches", "skill_names", "sources", "language", "agent_id", "workspace")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    SWITCHES_FIELD_NUMBER: _ClassVar[int]
    SKILL_NAMES_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    turn_id: str
    switches: TurnSwitches
    skill_names: _containers.RepeatedScalarFieldContainer[str]
    sources: _containers.RepeatedCompositeFieldContainer[Source]
    language: str
    agent_id: str
    workspace: bool
    def __init__(self, session_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., switches: _Optional[_Union[TurnSwitches, _Mapping]] = ..., skill_names: _Optional[_Iterable[str]] = ..., sources: _Optional[_Iterable[_Union[Source, _Mapping]]] = ..., language: _Optional[str] = ..., agent_id: _Optional[str] = ..., workspace: _Optional[bool] = ...) -> None: ...

class ExecuteToolRequest(_message.Message):
    __slots__ = ("name", "arguments", "tool_call_id", "context")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    name: str
    arguments: _struct_pb2.Struct
    tool_call_id: str
    context: ToolContext
    def __init__(self, name: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., tool_call_id: _Optional[str] = ..., context: _Optional[_Union[ToolContext, _Mapping]] = ...) -> None: ...

class ToolError(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: ToolErrorCode
    message: str
    def __init__(self, code: _Optional[_Union[ToolErrorCode, str]] = ..., message: _Optional[str] = ...) -> None: ...

class ToolArtifact(_message.Message):
    __slots__ = ("artifact_id", "file_name", "content_type", "size_bytes")
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    FILE_NAME_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    artifact_id: str
    file_name: str
    content_type: str
    size_bytes: int
    def __init__(self, artifact_id: _Optional[str] = ..., file_name: _Optional[str] = ..., content_type: _Optional[str] = ..., size_bytes: _Optional[int] = ...) -> None: ...

class ExecuteToolResponse(_message.Message):
    __slots__ = ("content", "json", "error", "stored", "ref_id", "summary", "hint", "distilled", "degraded", "attempts", "result_chars", "sources", "artifacts", "duration")
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    REF_ID_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    HINT_FIELD_NUMBER: _ClassVar[int]
    DISTILLED_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RESULT_CHARS_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    content: str
    json: _struct_pb2.Value
    error: ToolError
    stored: bool
    ref_id: str
    summary: str
    hint: str
    distilled: bool
    degraded: bool
    attempts: int
    result_chars: int
    sources: _containers.RepeatedCompositeFieldContainer[Source]
    artifacts: _containers.RepeatedCompositeFieldContainer[ToolArtifact]
    duration: _duration_pb2.Duration
    def __init__(self, content: _Optional[str] = ..., json: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., error: _Optional[_Union[ToolError, _Mapping]] = ..., stored: _Optional[bool] = ..., ref_id: _Optional[str] = ..., summary: _Optional[str] = ..., hint: _Optional[str] = ..., distilled: _Optional[bool] = ..., degraded: _Optional[bool] = ..., attempts: _Optional[int] = ..., result_chars: _Optional[int] = ..., sources: _Optional[_Iterable[_Union[Source, _Mapping]]] = ..., artifacts: _Optional[_Iterable[_Union[ToolArtifact, _Mapping]]] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class GetStoredDataRequest(_message.Message):
    __slots__ = ("ref_id",)
    REF_ID_FIELD_NUMBER: _ClassVar[int]
    ref_id: str
    def __init__(self, ref_id: _Optional[str] = ...) -> None: ...

class StoredData(_message.Message):
    __slots__ = ("ref_id", "tool_name", "content", "format", "char_count", "session_id", "turn_id", "create_time")
    REF_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    CHAR_COUNT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    ref_id: str
    tool_name: str
    content: str
    format: ContentFormat
    char_count: int
    session_id: str
    turn_id: str
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, ref_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., content: _Optional[str] = ..., format: _Optional[_Union[ContentFormat, str]] = ..., char_count: _Optional[int] = ..., session_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GetStoredDataResponse(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: StoredData
    def __init__(self, data: _Optional[_Union[StoredData, _Mapping]] = ...) -> None: ...

class DownloadArtifactRequest(_message.Message):
    __slots__ = ("artifact_id",)
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    artifact_id: str
    def __init__(self, artifact_id: _Optional[str] = ...) -> None: ...

class DownloadArtifactResponse(_message.Message):
    __slots__ = ("artifact", "chunk")
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    artifact: ToolArtifact
    chunk: bytes
    def __init__(self, artifact: _Optional[_Union[ToolArtifact, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class Skill(_message.Message):
    __slots__ = ("name", "description", "instructions_path", "has_scripts", "file_count", "update_time")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_PATH_FIELD_NUMBER: _ClassVar[int]
    HAS_SCRIPTS_FIELD_NUMBER: _ClassVar[int]
    FILE_COUNT_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    instructions_path: str
    has_scripts: bool
    file_count: int
    update_time: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., instructions_path: _Optional[str] = ..., has_scripts: _Optional[bool] = ..., file_count: _Optional[int] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class SkillFile(_message.Message):
    __slots__ = ("path", "size_bytes", "script")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SCRIPT_FIELD_NUMBER: _ClassVar[int]
    path: str
    size_bytes: int
    script: bool
    def __init__(self, path: _Optional[str] = ..., size_bytes: _Optional[int] = ..., script: _Optional[bool] = ...) -> None: ...

class ListSkillsRequest(_message.Message):
    __slots__ = ("names", "page_size", "page_token")
    NAMES_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    page_size: int
    page_token: str
    def __init__(self, names: _Optional[_Iterable[str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListSkillsResponse(_message.Message):
    __slots__ = ("skills", "next_page_token")
    SKILLS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    skills: _containers.RepeatedCompositeFieldContainer[Skill]
    next_page_token: str
    def __init__(self, skills: _Optional[_Iterable[_Union[Skill, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetSkillRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetSkillResponse(_message.Message):
    __slots__ = ("skill", "instructions", "files")
    SKILL_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    skill: Skill
    instructions: str
    files: _containers.RepeatedCompositeFieldContainer[SkillFile]
    def __init__(self, skill: _Optional[_Union[Skill, _Mapping]] = ..., instructions: _Optional[str] = ..., files: _Optional[_Iterable[_Union[SkillFile, _Mapping]]] = ...) -> None: ...

class ReadSkillFileRequest(_message.Message):
    __slots__ = ("skill_name", "path", "bound_skill_names")
    SKILL_NAME_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    BOUND_SKILL_NAMES_FIELD_NUMBER: _ClassVar[int]
    skill_name: str
    path: str
    bound_skill_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, skill_name: _Optional[str] = ..., path: _Optional[str] = ..., bound_skill_names: _Optional[_Iterable[str]] = ...) -> None: ...

class ReadSkillFileResponse(_message.Message):
    __slots__ = ("text", "data", "size_bytes", "truncated", "content_type")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    text: str
    data: bytes
    size_bytes: int
    truncated: bool
    content_type: str
    def __init__(self, text: _Optional[str] = ..., data: _Optional[bytes] = ..., size_bytes: _Optional[int] = ..., truncated: _Optional[bool] = ..., content_type: _Optional[str] = ...) -> None: ...

class SandboxFile(_message.Message):
    __slots__ = ("path", "content")
    PATH_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    path: str
    content: bytes
    def __init__(self, path: _Optional[str] = ..., content: _Optional[bytes] = ...) -> None: ...

class OutputFile(_message.Message):
    __slots__ = ("path", "artifact", "content")
    PATH_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    path: str
    artifact: ToolArtifact
    content: bytes
    def __init__(self, path: _Optional[str] = ..., artifact: _Optional[_Union[ToolArtifact, _Mapping]] = ..., content: _Optional[bytes] = ...) -> None: ...

class ExecuteSkillScriptRequest(_message.Message):
    __slots__ = ("skill_name", "script_path", "args", "input_files", "stdin", "timeout", "session_id", "turn_id", "bound_skill_names")
    SKILL_NAME_FIELD_NUMBER: _ClassVar[int]
    SCRIPT_PATH_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    INPUT_FILES_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    BOUND_SKILL_NAMES_FIELD_NUMBER: _ClassVar[int]
    skill_name: str
    script_path: str
    args: _containers.RepeatedScalarFieldContainer[str]
    input_files: _containers.RepeatedCompositeFieldContainer[SandboxFile]
    stdin: str
    timeout: _duration_pb2.Duration
    session_id: str
    turn_id: str
    bound_skill_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, skill_name: _Optional[str] = ..., script_path: _Optional[str] = ..., args: _Optional[_Iterable[str]] = ..., input_files: _Optional[_Iterable[_Union[SandboxFile, _Mapping]]] = ..., stdin: _Optional[str] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., session_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., bound_skill_names: _Optional[_Iterable[str]] = ...) -> None: ...

class ExecuteSkillScriptResponse(_message.Message):
    __slots__ = ("exit_code", "stdout", "stderr", "output_truncated", "timed_out", "output_files", "duration")
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FILES_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    exit_code: int
    stdout: str
    stderr: str
    output_truncated: bool
    timed_out: bool
    output_files: _containers.RepeatedCompositeFieldContainer[OutputFile]
    duration: _duration_pb2.Duration
    def __init__(self, exit_code: _Optional[int] = ..., stdout: _Optional[str] = ..., stderr: _Optional[str] = ..., output_truncated: _Optional[bool] = ..., timed_out: _Optional[bool] = ..., output_files: _Optional[_Iterable[_Union[OutputFile, _Mapping]]] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...
