//! [`Stats::fields`]: the counters by name, read from `Stats`'s own
//! `#[derive(Serialize)]`, so that the struct is the one list of them. The
//! Python package's `overlapped.stats()` is built from it; a counter added to
//! `Stats` is there without a second edit.
//!
//! Two serde serializers that accept only what `Stats` is made of: a struct
//! ([`Walk`]) whose fields are unsigned integers ([`Counter`]). A field of any
//! other type is left out, and the test below fails until this module
//! learns it.

use std::fmt;

use serde::ser::{self, Impossible, Serialize, SerializeStruct, Serializer};

use super::Stats;

impl Stats {
    /// Every counter with its name (the field's name, as the JSON of
    /// [`Stats`]'s `Serialize` spells it), in the order the struct declares
    /// them.
    ///
    /// ```
    /// # let engine = overlapped::Engine::builder().build().unwrap();
    /// for (name, value) in engine.stats().fields() {
    ///     println!("{name}: {value}");
    /// }
    /// ```
    pub fn fields(&self) -> impl Iterator<Item = (&'static str, u64)> {
        let mut out = Vec::with_capacity(32);
        // Only `NotStats` can come back, which `Stats` never gives.
        let walked = self.serialize(Walk(&mut out));
        debug_assert!(walked.is_ok(), "Stats is a struct of unsigned counters");
        out.into_iter()
    }
}

/// Why a value was not walked: it is not a struct of counters.
#[derive(Debug)]
struct NotStats;

impl fmt::Display for NotStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not a struct of unsigned counters")
    }
}

impl std::error::Error for NotStats {}

impl ser::Error for NotStats {
    fn custom<T: fmt::Display>(_: T) -> Self {
        NotStats
    }
}

/// The methods of a serializer that refuse what they are given.
macro_rules! refuse {
    ($($method:ident($($ty:ty),*)),* $(,)?) => {
        $(fn $method(self, $(_: $ty),*) -> Result<Self::Ok, NotStats> {
            Err(NotStats)
        })*
    };
}

/// The methods every serializer here refuses: everything but integers and
/// structs.
macro_rules! refuse_the_rest {
    () => {
        type SerializeSeq = Impossible<Self::Ok, NotStats>;
        type SerializeTuple = Impossible<Self::Ok, NotStats>;
        type SerializeTupleStruct = Impossible<Self::Ok, NotStats>;
        type SerializeTupleVariant = Impossible<Self::Ok, NotStats>;
        type SerializeMap = Impossible<Self::Ok, NotStats>;
        type SerializeStructVariant = Impossible<Self::Ok, NotStats>;
        refuse!(
            serialize_bool(bool),
            serialize_i8(i8),
            serialize_i16(i16),
            serialize_i32(i32),
            serialize_i64(i64),
            serialize_f32(f32),
            serialize_f64(f64),
            serialize_char(char),
            serialize_str(&str),
            serialize_bytes(&[u8]),
            serialize_none(),
            serialize_unit(),
            serialize_unit_struct(&'static str),
            serialize_unit_variant(&'static str, u32, &'static str),
        );
        fn serialize_some<T: ?Sized + Serialize>(self, _: &T) -> Result<Self::Ok, NotStats> {
            Err(NotStats)
        }
        fn serialize_newtype_struct<T: ?Sized + Serialize>(
            self,
            _: &'static str,
            _: &T,
        ) -> Result<Self::Ok, NotStats> {
            Err(NotStats)
        }
        fn serialize_newtype_variant<T: ?Sized + Serialize>(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: &T,
        ) -> Result<Self::Ok, NotStats> {
            Err(NotStats)
        }
        fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, NotStats> {
            Err(NotStats)
        }
        fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, NotStats> {
            Err(NotStats)
        }
        fn serialize_tuple_struct(
            self,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeTupleStruct, NotStats> {
            Err(NotStats)
        }
        fn serialize_tuple_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeTupleVariant, NotStats> {
            Err(NotStats)
        }
        fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, NotStats> {
            Err(NotStats)
        }
        fn serialize_struct_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeStructVariant, NotStats> {
            Err(NotStats)
        }
    };
}

/// Serializes a struct into the (name, value) of its counter fields.
struct Walk<'a>(&'a mut Vec<(&'static str, u64)>);

impl<'a> Serializer for Walk<'a> {
    type Ok = ();
    type Error = NotStats;
    type SerializeStruct = Self;
    refuse_the_rest!();
    refuse!(
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_u64(u64),
    );

    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self, NotStats> {
        Ok(self)
    }
}

impl SerializeStruct for Walk<'_> {
    type Ok = ();
    type Error = NotStats;

    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        name: &'static str,
        value: &T,
    ) -> Result<(), NotStats> {
        let v = value.serialize(Counter);
        debug_assert!(
            v.is_ok(),
            "every field of Stats is an unsigned counter: {name}"
        );
        if let Ok(v) = v {
            self.0.push((name, v));
        }
        Ok(())
    }

    fn end(self) -> Result<(), NotStats> {
        Ok(())
    }
}

/// Serializes an unsigned integer into its value.
struct Counter;

impl Serializer for Counter {
    type Ok = u64;
    type Error = NotStats;
    type SerializeStruct = Impossible<u64, NotStats>;
    refuse_the_rest!();

    fn serialize_u8(self, v: u8) -> Result<u64, NotStats> {
        Ok(v.into())
    }
    fn serialize_u16(self, v: u16) -> Result<u64, NotStats> {
        Ok(v.into())
    }
    fn serialize_u32(self, v: u32) -> Result<u64, NotStats> {
        Ok(v.into())
    }
    fn serialize_u64(self, v: u64) -> Result<u64, NotStats> {
        Ok(v)
    }
    fn serialize_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStruct, NotStats> {
        Err(NotStats)
    }
}

#[cfg(test)]
mod tests {
    use super::Stats;

    /// Every field of `Stats` comes out of `fields()`, by its name, with its
    /// value. The pattern below names every field (no `..`), so a field
    /// added to `Stats` does not compile here until it is checked too.
    #[test]
    fn fields_are_every_counter_of_stats_in_order() {
        let mut s = Stats::default();
        // A distinct value per field, in declaration order.
        let mut n = 0;
        let Stats {
            submitted,
            completed,
            completed_inline,
            completed_async,
            errors,
            bytes_read,
            bytes_written,
            inflight_ops_high_water,
            inflight_bytes_high_water,
            submit_syscalls,
            fast_path_hits,
            fast_path_misses,
            fast_path_skipped,
            backpressure_waits,
            resubmitted_after_exit,
            submitted_on_thread_rings,
            submitted_on_reactor_rings,
            reaped_by_watcher,
            ran_on_caller,
            submitted_aio,
            submitted_pool,
            submitted_iocp,
            iocp_busy_retries,
            iocp_waited_on_caller,
            aio_reaped_by_waiters,
            kernel_workers_seen,
            fixed_buffer_ops,
            fixed_file_ops,
            buffer_registrations_refused,
        } = &mut s;
        let expected: Vec<(&str, &mut u64)> = vec![
            ("submitted", submitted),
            ("completed", completed),
            ("completed_inline", completed_inline),
            ("completed_async", completed_async),
            ("errors", errors),
            ("bytes_read", bytes_read),
            ("bytes_written", bytes_written),
            ("inflight_ops_high_water", inflight_ops_high_water),
            ("inflight_bytes_high_water", inflight_bytes_high_water),
            ("submit_syscalls", submit_syscalls),
            ("fast_path_hits", fast_path_hits),
            ("fast_path_misses", fast_path_misses),
            ("fast_path_skipped", fast_path_skipped),
            ("backpressure_waits", backpressure_waits),
            ("resubmitted_after_exit", resubmitted_after_exit),
            ("submitted_on_thread_rings", submitted_on_thread_rings),
            ("submitted_on_reactor_rings", submitted_on_reactor_rings),
            ("reaped_by_watcher", reaped_by_watcher),
            ("ran_on_caller", ran_on_caller),
            ("submitted_aio", submitted_aio),
            ("submitted_pool", submitted_pool),
            ("submitted_iocp", submitted_iocp),
            ("iocp_busy_retries", iocp_busy_retries),
            ("iocp_waited_on_caller", iocp_waited_on_caller),
            ("aio_reaped_by_waiters", aio_reaped_by_waiters),
            ("kernel_workers_seen", kernel_workers_seen),
            ("fixed_buffer_ops", fixed_buffer_ops),
            ("fixed_file_ops", fixed_file_ops),
            ("buffer_registrations_refused", buffer_registrations_refused),
        ];
        let expected: Vec<(&str, u64)> = expected
            .into_iter()
            .map(|(name, field)| {
                n += 1;
                *field = 1000 + n;
                (name, *field)
            })
            .collect();
        let got: Vec<(&str, u64)> = s.fields().collect();
        assert_eq!(got, expected);
    }
}
