// The session tests' upstream: npm run demo-realtime (src/cli/demo-realtime.ts) on a free port of 127.0.0.1.
import { type DemoRealtime, startDemoRealtime } from '../../src/cli/demo-realtime.ts'

export { CACHED_TOKENS, INPUT_TOKENS } from '../../src/cli/demo-realtime.ts'

export type RealtimeUpstream = DemoRealtime

export function startRealtimeUpstream(): Promise<RealtimeUpstream> {
  return startDemoRealtime(0)
}
