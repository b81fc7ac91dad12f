// Target: a bare uWS WebSocket relay of the same upstream (bare-ws-relay-server.ts), no payment work.
import { createServer } from 'node:net'
import { startTs } from './processes.ts'
import type { Target } from './target.ts'

/**
 * `processes` relays on one port (as many as tollgate's workers, so both hold the same sockets per process:
 * a process may hold at most `ulimit -n` of them, and a relayed session holds two).
 */
export async function startBareWsRelay(options: {
  upstream: string
  maxMs: number
  processes?: number
}): Promise<Target & { pids: number[] }> {
  // uWS shares a port it was given (SO_REUSEPORT), not one the kernel picked for the first process: the port is
  // picked here, then given to each.
  const port = String(await freePort())
  const env = { UPSTREAM_URL: options.upstream, MAX_MS: String(options.maxMs), PORT: port }
  const children: Array<Awaited<ReturnType<typeof startTs>>> = []
  for (let i = 0; i < (options.processes ?? 1); i++)
    children.push(await startTs('bench/targets/bare-ws-relay-server.ts', env, /"port"/))
  const first = children[0]!
  return {
    name: 'bare-ws-relay',
    base: `http://127.0.0.1:${port}`,
    pid: first.proc.pid ?? null,
    pids: children.flatMap((c) => (c.proc.pid === undefined ? [] : [c.proc.pid])),
    stop: async () => {
      await Promise.all(children.map((c) => c.stop()))
    },
  }
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer()
    probe.once('error', reject)
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number }
      probe.close(() => resolve(port))
    })
  })
}
