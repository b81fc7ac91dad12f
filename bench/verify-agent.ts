// npx tsx bench/verify-agent.ts: CPU µs per verified Web Bot Auth request (one core; CPU time, so other work
// on a shared machine counts less), as the metered path does it for an endpoint with identity rules: the
// request's headers copied into a message view, the RFC 9421 signature checked against a warm key directory
// cache (Ed25519, signed by mppx's published signer). The nonce claim is left out: it is the database's
// work (one row written, measured with the books), not the data plane's CPU.
import { KeyDirectories } from '../src/identity/key-directories.ts'
import { messageView } from '../src/identity/message-view.ts'
import { verifyRequest } from '../src/identity/verify-request.ts'
import { BENCH_AGENT, BENCH_SIGNER, startAgentDirectory } from './targets/agent-directory.ts'

export async function measureVerify(count = 5_000): Promise<{ us_per_verify: number; verified: number }> {
  const agent = await startAgentDirectory()
  const directories = new KeyDirectories(
    {
      allowPrivate: true,
      fetchTimeoutMs: 5_000,
      minTtlMs: 60_000,
      maxTtlMs: 3_600_000,
      defaultTtlMs: 3_600_000,
      retryMs: 1_000,
      maxBytes: 65_536,
    },
    [{ name: BENCH_SIGNER, signatureAgent: BENCH_AGENT, url: agent.url }],
  )
  await directories.refreshAll()
  const url = 'http://127.0.0.1:8080/m/ep_bench'
  const signed = await agent.sign(url, count)
  const deps = {
    directories,
    keys: new Map(),
    claimNonce: async () => true,
    policy: { maxLifetimeS: 86_400, clockSkewS: 5, authorities: [] },
  }
  // As uWS hands them over: [name, value] pairs, copied into the view the verifier reads.
  const requests = signed.map((h) => [
    ['host', '127.0.0.1:8080'],
    ['accept', '*/*'],
    ['user-agent', 'bench'],
    ...Object.entries(h),
  ])
  let verified = 0
  const run = async (from: number, to: number) => {
    for (let i = from; i < to; i++) {
      const fields: Record<string, string> = {}
      for (const [k, v] of requests[i]!) fields[k!] = fields[k!] === undefined ? v! : `${fields[k!]}, ${v}`
      const view = messageView({
        method: 'GET',
        scheme: 'http',
        host: fields.host ?? '',
        target: '/m/ep_bench',
        headers: fields,
      })
      if ((await verifyRequest(deps, view)).status === 'verified') verified++
    }
  }
  // The first tenth warms the JIT, unmeasured.
  const warm = Math.floor(count / 10)
  await run(0, warm)
  const before = process.cpuUsage()
  await run(warm, count)
  const used = process.cpuUsage(before)
  directories.stop()
  await agent.close()
  return { us_per_verify: (used.user + used.system) / (count - warm), verified }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  measureVerify().then((r) => process.stdout.write(`${JSON.stringify(r)}\n`))
}
