// Target: a bare uWS WebSocket relay of the same upstream (bare-ws-relay-server.ts), no payment work.
import { startTs } from './processes.ts'
import type { Target } from './target.ts'

export async function startBareWsRelay(options: { upstream: string; maxMs: number }): Promise<Target> {
  const child = await startTs(
    'bench/targets/bare-ws-relay-server.ts',
    { UPSTREAM_URL: options.upstream, MAX_MS: String(options.maxMs) },
    /"port"/,
  )
  return {
    name: 'bare-ws-relay',
    base: `http://127.0.0.1:${JSON.parse(child.line).port}`,
    pid: child.proc.pid ?? null,
    stop: () => child.stop(),
  }
}
