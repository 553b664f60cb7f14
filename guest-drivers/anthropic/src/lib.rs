//! The built-in `anthropic` driver: Anthropic's Messages API.

mod wire;

mur_driver_kit::export_driver!(wire::Anthropic);
