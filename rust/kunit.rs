// SPDX-License-Identifier: GPL-2.0
//! KUnit suites, run by the kernel when the module loads (CONFIG_KUNIT=y).
//!
//! `rthin_core` runs every shared scenario of the core (the `selftest`
//! functions that the host tests call too) under the kernel's compiler flags:
//! overflow checks on, no floats, no allocation, kernel stack.
//! `scripts/check-core-kunit.sh` fails if a scenario is missing here.

use kernel::prelude::*;

#[kunit_tests(rthin_core)]
mod core_suite {
    #[test]
    fn args_parse_numbers() {
        assert!(crate::dm::args::selftest::parse_numbers());
    }

    #[test]
    fn args_cursor_walks_words() {
        assert!(crate::dm::args::selftest::cursor_walks_words());
    }

    #[test]
    fn args_kstrtoull_rules() {
        assert!(crate::dm::args::selftest::kstrtoull_rules());
    }

    #[test]
    fn args_dm_arg_rules() {
        assert!(crate::dm::args::selftest::dm_arg_rules());
    }

    #[test]
    fn dm_message_parses_all() {
        assert!(crate::dm::message::selftest::parses_all());
    }

    #[test]
    fn dm_message_errors() {
        assert!(crate::dm::message::selftest::errors());
    }

    #[test]
    fn dm_message_log_lines() {
        assert!(crate::dm::message::selftest::log_lines());
    }

    #[test]
    fn dm_pool_mode_mode_table() {
        assert!(crate::dm::pool_mode::selftest::mode_table());
    }

    #[test]
    fn dm_pool_mode_out_of_data_space_round_trip() {
        assert!(crate::dm::pool_mode::selftest::out_of_data_space_round_trip());
    }

    #[test]
    fn dm_pool_mode_no_space_timeout_flips_policy() {
        assert!(crate::dm::pool_mode::selftest::no_space_timeout_flips_policy());
    }

    #[test]
    fn dm_pool_mode_needs_check_and_fail_rules() {
        assert!(crate::dm::pool_mode::selftest::needs_check_and_fail_rules());
    }

    #[test]
    fn dm_pool_table_parses_minimal() {
        assert!(crate::dm::pool_table::selftest::parses_minimal());
    }

    #[test]
    fn dm_pool_table_canonical_feature_order() {
        assert!(crate::dm::pool_table::selftest::canonical_feature_order());
    }

    #[test]
    fn dm_pool_table_error_strings() {
        assert!(crate::dm::pool_table::selftest::error_strings());
    }

    #[test]
    fn dm_pool_table_io_limits() {
        assert!(crate::dm::pool_table::selftest::io_limits());
    }

    #[test]
    fn dm_status_pool_fresh() {
        assert!(crate::dm::status::selftest::pool_fresh());
    }

    #[test]
    fn dm_status_pool_odd_lines() {
        assert!(crate::dm::status::selftest::pool_odd_lines());
    }

    #[test]
    fn dm_status_thin_lines() {
        assert!(crate::dm::status::selftest::thin_lines());
    }

    #[test]
    fn dm_status_truncated_status() {
        assert!(crate::dm::status::selftest::truncated_status());
    }

    #[test]
    fn dm_status_buf_fits_and_terminates() {
        assert!(crate::dm::status_buf::selftest::fits_and_terminates());
    }

    #[test]
    fn dm_status_buf_truncation_is_reported() {
        assert!(crate::dm::status_buf::selftest::truncation_is_reported());
    }

    #[test]
    fn dm_status_buf_exact_fit() {
        assert!(crate::dm::status_buf::selftest::exact_fit());
    }

    #[test]
    fn dm_status_buf_tiny_buffers() {
        assert!(crate::dm::status_buf::selftest::tiny_buffers());
    }

    #[test]
    fn dm_status_buf_displays() {
        assert!(crate::dm::status_buf::selftest::displays());
    }

    #[test]
    fn dm_thin_table_parses_forms() {
        assert!(crate::dm::thin_table::selftest::parses_forms());
    }

    #[test]
    fn dm_thin_table_errors() {
        assert!(crate::dm::thin_table::selftest::errors());
    }

    #[test]
    fn dm_thin_table_table_lines() {
        assert!(crate::dm::thin_table::selftest::table_lines());
    }

    #[test]
    fn mapping_cache_publish_get_invalidate() {
        assert!(crate::metadata::mapping_cache::selftest::publish_get_invalidate());
    }

    #[test]
    fn mapping_cache_fills_and_evicts() {
        assert!(crate::metadata::mapping_cache::selftest::fills_and_evicts());
    }

    #[test]
    fn mapping_cache_per_device_changes() {
        assert!(crate::metadata::mapping_cache::selftest::per_device_changes());
    }

    #[test]
    fn mapping_cache_share_generations() {
        assert!(crate::metadata::mapping_cache::selftest::share_generations());
    }

    #[test]
    fn mapping_cache_ranges_and_limits() {
        assert!(crate::metadata::mapping_cache::selftest::ranges_and_limits());
    }

    #[test]
    fn mapping_cache_unstorable_publish_drops_old_entry() {
        assert!(crate::metadata::mapping_cache::selftest::unstorable_publish_drops_old_entry());
    }

    #[test]
    fn committed_tree_protocol() {
        assert!(crate::metadata::committed::selftest::protocol());
    }

    #[test]
    fn dm_events_data_low_water_once() {
        assert!(crate::dm::events::selftest::data_low_water_once());
    }

    #[test]
    fn dm_events_metadata_low_water_edges() {
        assert!(crate::dm::events::selftest::metadata_low_water_edges());
    }

    #[test]
    fn block_geometry_arithmetic() {
        assert!(crate::dm::block_geometry::selftest::arithmetic());
    }

    #[test]
    fn written_ranges() {
        assert!(crate::dm::written_ranges::selftest::ranges());
    }

    /// Harness self-check: built only with `RTHIN_SELFCHECK_FAIL=kunit`, it
    /// must make `make check` fail.
    #[cfg(rthin_selfcheck_fail)]
    #[test]
    fn deliberately_fails() {
        // black_box keeps the compiler from seeing through the failure.
        let two = core::hint::black_box(2);
        assert_eq!(two, 3);
    }
}

/// Glue and target logic that needs no device.
#[kunit_tests(rthin_glue)]
mod glue_suite {
    #[test]
    fn bufio_kind_codes_round_trip() {
        assert!(crate::glue::bufio::selftest::kind_codes_round_trip());
    }

    #[test]
    fn pool_metadata_reserve() {
        assert!(crate::pool::selftest::metadata_reserve());
    }

    #[test]
    fn deferred_push_and_drain() {
        assert!(crate::glue::deferred::selftest::push_and_drain());
    }

    #[test]
    fn inflight_grace_period_waits_for_reader() {
        assert!(crate::glue::inflight::selftest::grace_period_waits_for_reader());
    }

    #[test]
    fn mapping_cache_under_rcu() {
        assert!(crate::io::selftest::cache_under_rcu());
    }

    #[test]
    fn pool_cache_share_generation_wraps() {
        assert!(crate::pool::cache::selftest::share_generation_wraps());
    }

    #[test]
    fn pool_cache_deleted_devs_are_forgotten() {
        assert!(crate::pool::cache::selftest::deleted_devs_are_forgotten());
    }

    #[test]
    fn committed_tree_under_commits() {
        assert!(crate::pool::committed::selftest::committed_tree_under_commits());
    }

    #[test]
    fn args_from_argv() {
        assert!(crate::glue::dm::selftest::args_from_argv());
    }
}
