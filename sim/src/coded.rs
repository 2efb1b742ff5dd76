//! Enums of protocol error codes declared from one list of `Variant = code`.

/// Declares an enum whose variants each carry a protocol code, from one list
/// `Variant = code,` (each with its doc comment): the enum (with the attributes given before
/// `pub enum`), `ALL` (every variant in declaration order, for the lookup of a code a real
/// server sends) and `code()`. The list is written once, so a variant cannot be added to
/// the enum and forgotten in `ALL` or `code()`.
macro_rules! coded_enum {
    (
        $(#[$meta:meta])*
        pub enum $enum:ident: $code_ty:ty {
            $($(#[$doc:meta])* $name:ident = $code:expr,)*
        }
    ) => {
        $(#[$meta])*
        pub enum $enum {
            $($(#[$doc])* $name,)*
        }

        impl $enum {
            /// Every variant, in declaration order (the lookup by code walks it).
            pub const ALL: &'static [$enum] = &[$($enum::$name,)*];

            /// The variant's code, as the real server sends it.
            pub fn code(self) -> $code_ty {
                match self {
                    $($enum::$name => $code,)*
                }
            }
        }
    };
}

pub(crate) use coded_enum;
