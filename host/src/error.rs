//! The one error type users see: `error[E-AREA-NNN]: what happened` and a hint.

use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub struct Error {
    pub code: &'static str,
    pub message: String,
    pub hint: Option<String>,
}

impl Error {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Error {
            code,
            message: message.into(),
            hint: None,
        }
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let message = crate::secret::scrub(&self.message);
        write!(f, "error[{}]: {message}", self.code)?;
        if let Some(hint) = &self.hint {
            write!(f, "\n  hint: {}", crate::secret::scrub(hint))?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}
