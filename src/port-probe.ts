// Refuses to start on a port something already listens on. uWS binds with SO_REUSEPORT, so a second
// tollgate on the same port would silently share it (requests alternating between two instances); a plain
// exclusive listen from node fails with EADDRINUSE instead, and that is the check.
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
