/*
 * sg_file: whole-file reads and atomic whole-file writes, the two ways
 * signet touches files it owns (keys, key sets, configuration it writes).
 *
 * A write goes to a temporary file in the same folder, is fsync'ed and is
 * renamed over the target, so a reader (or a crash) sees the old file or
 * the new one, never half of one. A read is bounded: the size limit is
 * checked while reading, before the buffer can grow past it.
 *
 * Neither logs anything, so a file holding a key is never named in a log
 * line by this module; failures carry the path in the error detail only.
 */
#ifndef SG_FILE_H
#define SG_FILE_H

#include "sg_error.h"

#include <stddef.h>
#include <stdint.h>

/* Writes len bytes to path through path.tmp.<pid> (created O_EXCL with
 * mode, a stale one removed first), fchmod'ed to mode whatever the umask,
 * fsync'ed, closed and renamed over path (an existing file is replaced).
 * On failure the temporary file is removed and path is untouched.
 * SG_EINVAL with the detail (which names the path) on any failure. */
SG_API int sg_file_write_atomic(const char *path, const void *data, size_t len, unsigned mode) SG_MUST_CHECK;

/* The same write for a file that must not exist yet (a new CA's files,
 * written into a folder that may hold what is not ours): SG_EINVAL if path
 * exists (even as a dangling symlink), and the temporary file, path.new,
 * is never removed before use: if it exists, the write fails instead.
 * The check and the rename are not one step: the caller owns the folder. */
SG_API int sg_file_write_new(const char *path, const void *data, size_t len, unsigned mode) SG_MUST_CHECK;

/* Makes what was done to dir's entries durable (a rename into it, an
 * unlink, a new file): open and fsync the folder itself. SG_EINVAL with
 * the detail when it cannot be opened or synced. */
SG_API int sg_file_sync_dir(const char *dir) SG_MUST_CHECK;

/* Reads the whole of path, at most max bytes, into a new buffer that is
 * NUL-terminated (the NUL not counted in *len). The caller frees *out with
 * free(), after sg_wipe when it holds a secret; on failure nothing is
 * returned and whatever was read is wiped. SG_ENOTFOUND when the file
 * cannot be opened, SG_EINVAL when it is not a regular file (a directory,
 * a FIFO, a socket, a device: refused without opening it or waiting),
 * cannot be read or holds more than max bytes, SG_EINTERNAL when out of
 * memory. Symbolic links are followed. */
SG_API int sg_file_read(const char *path, size_t max, uint8_t **out, size_t *len) SG_MUST_CHECK;

#endif
