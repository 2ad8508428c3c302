//! NPB problem classes: each fixes a kernel's sizes, its iteration count and its official
//! verification values.

use std::fmt;
use std::str::FromStr;

/// A problem class of the NAS Parallel Benchmarks, smallest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    S,
    W,
    A,
    B,
    C,
}

impl Class {
    /// Every class, smallest first.
    pub const ALL: [Class; 5] = [Class::S, Class::W, Class::A, Class::B, Class::C];

    /// The class's letter, as NPB prints it.
    pub fn letter(self) -> char {
        match self {
            Class::S => 'S',
            Class::W => 'W',
            Class::A => 'A',
            Class::B => 'B',
            Class::C => 'C',
        }
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.letter())
    }
}

impl FromStr for Class {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        Class::ALL
            .into_iter()
            .find(|c| text.len() == 1 && text.eq_ignore_ascii_case(&c.letter().to_string()))
            .ok_or_else(|| format!("unknown NPB class {text:?}: one of S, W, A, B, C"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn letters_round_trip_and_junk_is_refused() {
        for class in Class::ALL {
            assert_eq!(class.letter().to_string().parse::<Class>(), Ok(class));
        }
        assert_eq!("a".parse::<Class>(), Ok(Class::A));
        assert!("D".parse::<Class>().unwrap_err().contains("one of S, W, A, B, C"));
        assert!("AA".parse::<Class>().is_err());
    }
}
