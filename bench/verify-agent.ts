// npx tsx bench/verify-agent.ts: CPU µs per verified Web Bot Auth request (one core; CPU time, so other work
// on a shared machine counts less), as the metered path does it for an endpoint with identity rules: the
// request's headers copied into a message view, the RFC 9421 signature checked against a warm key directory
// cache (Ed25519, signed by mppx's published signer). The nonce claim is left out: it is the database's
// work (one row written with a paid call, none on a 402: docs/agent-identity.md), not the data plane's CPU.
// Beside it, on the same requests: the Ed25519 verify alone (the verifier's backend, libsodium where it
// loads, and node:crypto's one-shot with the cached KeyObject, OpenSSL), so what our own code adds is the
// difference; and the two signature
// headers parsed by our RFC 8941 parser and by the structured-headers package mppx uses.
import { verify } from 'node:crypto'
import { parseDictionary as libraryParse } from 'structured-headers'
import { ed25519Backend, verifyEd25519 } from '../src/identity/ed25519.ts'
import { KeyDirectories } from '../src/identity/key-directories.ts'
import { messageView } from '../src/identity/message-view.ts'
import { buildSignatureBase } from '../src/identity/signature-base.ts'
import { type InnerList, type Item, parseDictionary } from '../src/identity/structured-fields.ts'
import { checkSignature } from '../src/identity/verify-request.ts'
import { BENCH_AGENT, BENCH_SIGNER, startAgentDirectory } from './targets/agent-directory.ts'

type Fields = Record<string, string>

export interface VerifyCost {
  verified: number
  /** The whole check (view, parse, window, key look-up, base, Ed25519), nonce claim left out. */
  us_per_verify: number
  /** The verifier's Ed25519 (src/identity/ed25519.ts) on the same bases and signatures, nothing else. */
  us_ed25519_alone: number
  ed25519_backend: string
  /** node:crypto's (OpenSSL) one-shot verify of the same, the fallback. */
  us_ed25519_node: number
  /** us_per_verify less us_ed25519_alone: what tollgate's own code adds. */
  us_own_code: number
  /** Signature-Input and Signature parsed: our parser, and the structured-headers package. */
  us_parse_own: number
  us_parse_library: number
}

function cpuUs<T>(items: readonly T[], each: (item: T) => void): number {
  // The first tenth warms the JIT, unmeasured.
  const warm = Math.floor(items.length / 10)
  for (let i = 0; i < warm; i++) each(items[i]!)
  const before = process.cpuUsage()
  for (let i = warm; i < items.length; i++) each(items[i]!)
  const used = process.cpuUsage(before)
  return (used.user + used.system) / (items.length - warm)
}

export async function measureVerify(count = 5_000): Promise<VerifyCost> {
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
    policy: { maxLifetimeS: 86_400, clockSkewS: 5, authorities: [] },
  }
  // As uWS hands them over: [name, value] pairs, copied into the view the verifier reads.
  const requests = signed.map((h) => [
    ['host', '127.0.0.1:8080'],
    ['accept', '*/*'],
    ['user-agent', 'bench'],
    ...Object.entries(h),
  ])
  const viewOf = (pairs: string[][]) => {
    const fields: Fields = {}
    for (const [k, v] of pairs) fields[k!] = fields[k!] === undefined ? v! : `${fields[k!]}, ${v}`
    return messageView({
      method: 'GET',
      scheme: 'http',
      host: fields.host ?? '',
      target: '/m/ep_bench',
      headers: fields,
    })
  }
  let verified = 0
  const verifyAll = () => {
    verified = 0
    return cpuUs(requests, (pairs) => {
      if (checkSignature(deps, viewOf(pairs)).status === 'verified') verified++
    })
  }
  // Twice, the second measured: the first pass runs beside the collection of the signing's garbage.
  verifyAll()
  const us_per_verify = verifyAll()
  // The same bases and signatures, built beforehand: Ed25519 and nothing else.
  const crypto = signed.map((h) => {
    const input = parseDictionary(h['signature-input']!)!.get('webbot') as InnerList
    const sig = (parseDictionary(h.signature!)!.get('webbot') as Item).value as Uint8Array
    const keyid = input.params.get('keyid') as string
    const found = directories.lookup(BENCH_AGENT, keyid)
    if (found.status !== 'found') throw new Error('bench key not cached')
    const base = buildSignatureBase(viewOf([['host', '127.0.0.1:8080'], ...Object.entries(h)]), input)
    if (!base.ok) throw new Error(base.reason)
    return { data: Buffer.from(base.base), key: found.key.key, sig }
  })
  const us_ed25519_alone = cpuUs(crypto, (c) => {
    if (!verifyEd25519(c.key, c.data, c.sig)) throw new Error('bench signature did not verify')
  })
  const us_ed25519_node = cpuUs(crypto, (c) => {
    if (!verify(null, c.data, c.key, c.sig)) throw new Error('bench signature did not verify')
  })
  const us_parse_own = cpuUs(signed, (h) => {
    parseDictionary(h['signature-input']!)
    parseDictionary(h.signature!)
  })
  const us_parse_library = cpuUs(signed, (h) => {
    libraryParse(h['signature-input']!)
    libraryParse(h.signature!)
  })
  directories.stop()
  await agent.close()
  return {
    verified,
    us_per_verify,
    us_ed25519_alone,
    ed25519_backend: ed25519Backend,
    us_ed25519_node,
    us_own_code: us_per_verify - us_ed25519_alone,
    us_parse_own,
    us_parse_library,
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  measureVerify(Number(process.env.BENCH_VERIFY_COUNT ?? 5_000)).then((r) =>
    process.stdout.write(`${JSON.stringify(r)}\n`),
  )
}
