// One owner per data directory: a lock file holding the owner's PID, created with O_EXCL, taken over when
// that PID is dead (a crash or SIGKILL leaves the file behind), removed by its owner on stop and on exit.
import { closeSync, mkdirSync, openSync, readFileSync, unlinkSync, writeSync } from 'node:fs'
import { hostname } from 'node:os'
import { dirname } from 'node:path'

export class LockHeldError extends Error {
  readonly code = 'TOLLGATE_DATA_DIR_LOCKED'
}

export interface HeldLock {
  path: string
  release(): void
}

const ATTEMPTS = 3

/**
 * Creates `path` exclusively with this process's PID in it. `what` names the guarded thing in the error
 * (e.g. 'the embedded database .data/pglite'). Throws LockHeldError while a live process holds it.
 */
export function acquireLockFile(path: string, what: string): HeldLock {
  mkdirSync(dirname(path), { recursive: true })
  const content = `${process.pid}\n${hostname()}\n`
  for (let attempt = 1; ; attempt++) {
    let fd: number
    try {
      fd = openSync(path, 'wx', 0o644)
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST' || attempt >= ATTEMPTS) throw err
      const holder = readHolder(path)
      if (holder !== null && (holder.pid === process.pid || isAlive(holder.pid))) {
        throw new LockHeldError(
          `${what} is already in use by process ${holder.pid}${holder.pid === process.pid ? ' (this process)' : ''} ` +
            `(lock file ${path}). Stop that tollgate first, or give this one its own data directory ` +
            '(database.data_dir / TOLLGATE_CONFIG). Several processes on one port: use server.workers.',
        )
      }
      // The holder is dead (or the file is unreadable junk): a stale lock, taken over. Two processes that
      // take over the same stale lock at the same instant could both win; the window is one unlink+open.
      try {
        unlinkSync(path)
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e
      }
      continue
    }
    try {
      writeSync(fd, content)
    } finally {
      closeSync(fd)
    }
    break
  }
  let released = false
  const release = () => {
    if (released) return
    released = true
    process.off('exit', release)
    // Only our own lock: a later owner's file stays.
    if (readHolder(path)?.pid !== process.pid) return
    try {
      unlinkSync(path)
    } catch {}
  }
  // A process that exits without stop() (process.exit on a fatal error) still leaves no lock behind.
  process.on('exit', release)
  return { path, release }
}

function readHolder(path: string): { pid: number } | null {
  try {
    const pid = Number.parseInt(readFileSync(path, 'utf8').split('\n')[0] ?? '', 10)
    return Number.isInteger(pid) && pid > 0 ? { pid } : null
  } catch {
    return null
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (err) {
    // EPERM: it exists, under another user.
    return (err as NodeJS.ErrnoException).code === 'EPERM'
  }
}
