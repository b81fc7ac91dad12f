// What the demo upstreams (npm run demo-llm, npm run demo-mcp) share: listening on loopback only, and the
// command line: --port, else an environment variable, else a default; --help; exit 2 on a usage error.
import type { Server } from 'node:http'
import { parseArgs } from 'node:util'

export interface Listening {
  port: number
  close(): Promise<void>
}

/** Listens on 127.0.0.1:port (0: any free port): a demo upstream is never reachable from elsewhere. */
export function listenLocal(server: Server, port: number): Promise<Listening> {
  return new Promise((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, '127.0.0.1', () => {
      resolve({
        port: (server.address() as { port: number }).port,
        close: () =>
          new Promise<void>((done) => {
            server.closeAllConnections()
            server.close(() => done())
          }),
      })
    })
  })
}

/** Runs a demo server as a program: parses argv, starts it, says where it listens (on stderr). */
export function runDemoServer(o: {
  name: string
  usage: string
  portEnv: string
  defaultPort: number
  start(port: number): Promise<Listening>
  where(port: number): string
}): void {
  let port: number
  try {
    const { values } = parseArgs({
      options: { port: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
      strict: true,
    })
    if (values.help) {
      process.stdout.write(o.usage)
      process.exit(0)
    }
    const given = values.port ?? process.env[o.portEnv]
    port = given === undefined ? o.defaultPort : Number(given)
    if (!/^\d{1,5}$/.test(given ?? '0') || port > 65535) throw new Error(`port ${given} is not a port number`)
  } catch (err) {
    process.stderr.write(`${o.name}: ${(err as Error).message}\n\n${o.usage}`)
    process.exit(2)
  }
  o.start(port).then(
    (s) => process.stderr.write(`${o.name}: ${o.where(s.port)}\n`),
    (err: Error) => {
      process.stderr.write(`${o.name}: ${err.message}\n`)
      process.exit(1)
    },
  )
}
