"""convlog's events: the event model, conversation keys, the producer, the event log port and
its two backends (Kafka, one embedded file), and the root of the error tree.

Everything a chat app needs to append events::

    from events import ConversationKey, ConversationProducer, KafkaEventLog

The model types, keys, the log port and the errors are imported with the package; the
producer, the codec and the backends (which import fastavro and aiokafka) on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from events.errors import (
    ConfigurationError,
    ConvlogError,
    CorruptRecordError,
    DecodeError,
    EventTooLargeError,
    InvalidEventError,
    InvalidKeyError,
    InvalidRequestError,
    LogBehindReadModelsError,
    LogClosedError,
    LogCorruptError,
    LogError,
    LogLockedError,
    LogStorageFullError,
    LogUnavailableError,
    UnknownSchemaError,
)
from events.event_types import (
    Content,
    ContentPart,
    ConversationCleared,
    ConversationErased,
    ConversationStarted,
    Event,
    EventBody,
    FinishReason,
    ImageDetail,
    ImagePart,
    MessageAppended,
    MessageRedacted,
    Role,
    SummaryRecorded,
    TextPart,
    ToolCall,
    Usage,
)
from events.keys import ConversationKey, partition_for_key
from events.log import Coordinates, EventLog, LogRecord, ReadBatch
from events.strict_json import NotJsonError

if TYPE_CHECKING:
    from events.codec import EventCodec, default_codec
    from events.embedded_log import EmbeddedEventLog
    from events.kafka_log import KafkaEventLog
    from events.producer import EVENT_TYPE_HEADER, Appended, ConversationProducer
else:
    from events._lazy import lazy_exports

    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "EventCodec": "events.codec",
            "default_codec": "events.codec",
            "EmbeddedEventLog": "events.embedded_log",
            "KafkaEventLog": "events.kafka_log",
            "EVENT_TYPE_HEADER": "events.producer",
            "Appended": "events.producer",
            "ConversationProducer": "events.producer",
        },
    )

__all__ = [
    "EVENT_TYPE_HEADER",
    "Appended",
    "ConfigurationError",
    "Content",
    "ContentPart",
    "ConversationCleared",
    "ConversationErased",
    "ConversationKey",
    "ConversationProducer",
    "ConversationStarted",
    "ConvlogError",
    "Coordinates",
    "CorruptRecordError",
    "DecodeError",
    "EmbeddedEventLog",
    "Event",
    "EventBody",
    "EventCodec",
    "EventLog",
    "EventTooLargeError",
    "FinishReason",
    "ImageDetail",
    "ImagePart",
    "InvalidEventError",
    "InvalidKeyError",
    "InvalidRequestError",
    "KafkaEventLog",
    "LogBehindReadModelsError",
    "LogClosedError",
    "LogCorruptError",
    "LogError",
    "LogLockedError",
    "LogRecord",
    "LogStorageFullError",
    "LogUnavailableError",
    "MessageAppended",
    "MessageRedacted",
    "NotJsonError",
    "ReadBatch",
    "Role",
    "SummaryRecorded",
    "TextPart",
    "ToolCall",
    "UnknownSchemaError",
    "Usage",
    "default_codec",
    "partition_for_key",
]
