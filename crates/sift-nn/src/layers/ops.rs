//! What the models build with, in one import: the activations, linear layers, norms and
//! attention of the modules beside this one.
pub use super::act::{Act, parse_act};
pub use super::attention::{Attention, ScoreBias, Segment, padding_key_bias};
pub use super::kernels::Kernels;
pub use super::linear::{
    PackedLinear, Packing, Proj, activation_dtype, fuse_qkv, linear, linear_act, load_linear,
    scale_query_rows,
};
pub use super::norm::{Norm, l2_normalize, load_layer_norm, load_norm};
