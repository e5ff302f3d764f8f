//! Text in and out of a model: the tokenizer ([`tokenizer`]) and the Jinja
//! chat templates that turn a conversation into a prompt ([`chat_template`]).

pub mod chat_template;
pub mod tokenizer;
