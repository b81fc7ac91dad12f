// Target: a bare uWS process relaying every request to the upstream through tollgate's proxy(), no payment.
import { startTs } from './processes.ts'
import type { Target } from './target.ts'
import { nodeArgs } from './tollgate.ts'

export async function startBareRelay(options: {
  upstream: string
  maxMs: number
  profileDir?: string
}): Promise<Target> {
  const child = await startTs(
    'bench/targets/bare-relay-server.ts',
    {
      UPSTREAM_URL: options.upstream,
      MAX_MS: String(options.maxMs),
      ...nodeArgs(options.profileDir),
    },
    /"port"/,
  )
  return {
    name: 'bare-relay',
    base: `http://127.0.0.1:${JSON.parse(child.line).port}`,
    pid: child.proc.pid ?? null,
    stop: () => child.stop(),
  }
}
