// Target: the upstream itself, called directly (the ceiling every ratio is measured against).
import { startTs } from './processes.ts'
import type { Target } from './target.ts'

export async function startUpstream(maxMs: number): Promise<Target> {
  const child = await startTs('bench/targets/upstream-server.ts', { MAX_MS: String(maxMs) }, /"port"/)
  return {
    name: 'upstream',
    base: `http://127.0.0.1:${JSON.parse(child.line).port}`,
    pid: child.proc.pid ?? null,
    stop: () => child.stop(),
  }
}
