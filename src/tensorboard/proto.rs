//! The protobuf messages of TensorBoard's event files, the fields this crate writes (and reads
//! back in its tests), derived with prost from TensorFlow's `event.proto`, `summary.proto` and
//! `tensor.proto`: the field numbers are theirs.

use prost::{Message, Oneof};

/// One record of an event file: the file's version (first), or a summary of values at a step.
#[derive(Clone, PartialEq, Message)]
pub struct Event {
    /// Seconds since the Unix epoch.
    #[prost(double, tag = "1")]
    pub wall_time: f64,
    /// The step the values belong to.
    #[prost(int64, tag = "2")]
    pub step: i64,
    /// What the record holds.
    #[prost(oneof = "What", tags = "3, 5")]
    pub what: Option<What>,
}

/// [`Event`]'s content.
#[derive(Clone, PartialEq, Oneof)]
pub enum What {
    /// `brain.Event:2`, in the file's first record.
    #[prost(string, tag = "3")]
    FileVersion(String),
    /// Values at the event's step.
    #[prost(message, tag = "5")]
    Summary(Summary),
}

/// Values at one step.
#[derive(Clone, PartialEq, Message)]
pub struct Summary {
    /// One per tag.
    #[prost(message, repeated, tag = "1")]
    pub value: Vec<SummaryValue>,
}

/// One tagged value.
#[derive(Clone, PartialEq, Message)]
pub struct SummaryValue {
    /// The chart's name: `train/loss`, `valid/perplexity`, ...
    #[prost(string, tag = "1")]
    pub tag: String,
    /// Which plugin shows the value (the text plugin for a tensor of strings).
    #[prost(message, optional, tag = "9")]
    pub metadata: Option<SummaryMetadata>,
    /// The value.
    #[prost(oneof = "ValueKind", tags = "2, 8")]
    pub value: Option<ValueKind>,
}

/// [`SummaryValue`]'s value.
#[derive(Clone, PartialEq, Oneof)]
pub enum ValueKind {
    /// A scalar (TensorBoard's scalars dashboard).
    #[prost(float, tag = "2")]
    SimpleValue(f32),
    /// A tensor (strings for the text dashboard).
    #[prost(message, tag = "8")]
    Tensor(TensorProto),
}

/// Which plugin a value is for.
#[derive(Clone, PartialEq, Message)]
pub struct SummaryMetadata {
    /// The plugin's name and its data.
    #[prost(message, optional, tag = "1")]
    pub plugin_data: Option<PluginData>,
}

/// A plugin's name (`text`) and its own data (empty for the text plugin).
#[derive(Clone, PartialEq, Message)]
pub struct PluginData {
    /// The plugin's name.
    #[prost(string, tag = "1")]
    pub plugin_name: String,
    /// The plugin's data about the value.
    #[prost(bytes = "vec", tag = "2")]
    pub content: Vec<u8>,
}

/// A tensor: here a scalar string (no dimensions).
#[derive(Clone, PartialEq, Message)]
pub struct TensorProto {
    /// The element type ([`DT_STRING`]).
    #[prost(int32, tag = "1")]
    pub dtype: i32,
    /// The shape (no dimensions: a scalar).
    #[prost(message, optional, tag = "2")]
    pub tensor_shape: Option<TensorShapeProto>,
    /// The strings.
    #[prost(bytes = "vec", repeated, tag = "8")]
    pub string_val: Vec<Vec<u8>>,
}

/// A tensor's shape.
#[derive(Clone, PartialEq, Message)]
pub struct TensorShapeProto {}

/// TensorFlow's `DataType` of strings.
pub const DT_STRING: i32 = 7;
