// Refuses to start on a port something already listens on. uWS binds with SO_REUSEPORT, so a second
// tollgate on the same port would silently share it (requests alternating between two instances); a plain
// exclusive listen from node fails with EADDRINUSE instead, and that is the check. And the other way round:
// whether a child process started on a probed port is the one listening there (listensOn).
import { readdirSync, readFileSync, readlinkSync } from 'node:fs'
import { createServer } from 'node:net'

export class PortInUseError extends Error {
  readonly code = 'TOLLGATE_PORT_IN_USE'
}

/** Resolves when host:port is free (port 0 always is); rejects with PortInUseError otherwise. */
export function assertPortFree(host: string, port: number, what: string): Promise<void> {
  if (port === 0) return Promise.resolve()
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.unref()
    server.once('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'EADDRINUSE') {
        reject(
          new PortInUseError(
            `${what} ${host}:${port} is already in use (another tollgate, or another program). Stop it, or set ` +
              'a different port; to serve one port from several processes on purpose, use server.workers.',
          ),
        )
      } else reject(err)
    })
    server.listen({ host, port, exclusive: true }, () => server.close(() => resolve()))
  })
}

/**
 * Whether process `pid` holds a listening TCP socket on `port`, IPv4 or IPv6, any local address (Linux: a
 * LISTEN row's socket inode in /proc/net/tcp{,6} among the process's descriptors); null where the OS does not
 * tell.
 */
export function listensOn(pid: number | undefined, port: number): boolean | null {
  if (pid === undefined) return false
  const suffix = `:${port.toString(16).toUpperCase().padStart(4, '0')}`
  const inodes = new Set<string>()
  let readable = false
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let table: string
    try {
      table = readFileSync(file, 'utf8')
      readable = true
    } catch {
      continue
    }
    for (const line of table.split('\n')) {
      const f = line.trim().split(/\s+/)
      // sl local_address rem_address st ... inode (the 10th field); st 0A is LISTEN
      if (f[3] === '0A' && f[1]?.endsWith(suffix) && f[9] !== undefined) inodes.add(`socket:[${f[9]}]`)
    }
  }
  if (!readable) return null
  if (inodes.size === 0) return false
  try {
    for (const fd of readdirSync(`/proc/${pid}/fd`)) {
      try {
        if (inodes.has(readlinkSync(`/proc/${pid}/fd/${fd}`))) return true
      } catch {}
    }
  } catch {
    return null
  }
  return false
}
