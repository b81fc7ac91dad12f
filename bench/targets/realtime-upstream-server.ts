// The sessions bench's upstream in a process of its own: npm run demo-realtime's server on a free port.
import { startDemoRealtime } from '../../src/cli/demo-realtime.ts'

const server = await startDemoRealtime(0)
process.stdout.write(`${JSON.stringify({ port: server.port })}\n`)
setTimeout(() => process.exit(0), Number(process.env.MAX_MS ?? 600_000)).unref()
process.on('SIGTERM', () => process.exit(0))
