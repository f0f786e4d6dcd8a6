//! What Windows alone has, beside the API every system shares: the
//! privilege that [`File::set_valid_data`](crate::File::set_valid_data)
//! needs.

use windows_sys::Win32::Security::SE_MANAGE_VOLUME_NAME;

/// Enables `SeManageVolumePrivilege` in the process's token
/// (`OpenProcessToken`, `LookupPrivilegeValueW`, `AdjustTokenPrivileges`),
/// which [`File::set_valid_data`](crate::File::set_valid_data)
/// (`SetFileValidData`) needs. Administrators hold the privilege (and
/// accounts granted "Perform volume maintenance tasks" in the local
/// security policy), but Windows does not enable it by default; the
/// engine's threads run with the process's token, so enabling it once
/// covers them all. It stays enabled for the life of the process.
///
/// Returns `Ok(true)` when the privilege is enabled now (or already was),
/// `Ok(false)` when the token does not hold it (not elevated, or not
/// granted; `AdjustTokenPrivileges` then answers `ERROR_NOT_ALL_ASSIGNED`
/// and changes nothing).
///
/// ```no_run
/// # fn main() -> std::io::Result<()> {
/// if !overlapped::enable_manage_volume_privilege()? {
///     eprintln!("no SeManageVolumePrivilege: writes past the valid data stay synchronous");
/// }
/// # Ok(())
/// # }
/// ```
///
/// # Errors
///
/// The system's error when the token cannot be opened or adjusted, or the
/// privilege's name is unknown to it.
pub fn enable_manage_volume_privilege() -> std::io::Result<bool> {
    crate::sys::enable_privilege(SE_MANAGE_VOLUME_NAME)
}
