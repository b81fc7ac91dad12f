// The signed-agent scenario's agent: one Ed25519 key, its Web Bot Auth key directory on 127.0.0.1, and
// request signatures made ahead of the load by mppx's published signer (each nonce is used once).
import { createHash, type webcrypto } from 'node:crypto'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Client } from 'mppx/attestation/web-bot-auth'

/** The origin the agent names in Signature-Agent; tollgate is configured to fetch it from `url`. */
export const BENCH_AGENT = 'https://agent.bench.example'
export const BENCH_SIGNER = 'bench-agent'

export interface AgentDirectory {
  url: string
  /** n signatures of GET `url`, each with its own nonce: the headers to send with one request each. */
  sign(url: string, n: number): Promise<Array<Record<string, string>>>
  close(): Promise<void>
}

export async function startAgentDirectory(): Promise<AgentDirectory> {
  const pair = (await crypto.subtle.generateKey({ name: 'Ed25519' }, true, [
    'sign',
    'verify',
  ])) as webcrypto.CryptoKeyPair
  const jwk = (await crypto.subtle.exportKey('jwk', pair.publicKey)) as Record<string, string>
  const publicJwk = { kty: jwk.kty!, crv: jwk.crv!, x: jwk.x! }
  const keyId = createHash('sha256')
    .update(JSON.stringify({ crv: publicJwk.crv, kty: publicJwk.kty, x: publicJwk.x }))
    .digest('base64url')
  const body = JSON.stringify({ keys: [publicJwk] })
  const server = createServer((_req, res) => {
    res.writeHead(200, {
      'content-type': 'application/http-message-signatures-directory+json',
      'cache-control': 'max-age=3600',
    })
    res.end(body)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  // It lives as long as the bench process: it must not keep that process from ending.
  server.unref()
  const { port } = server.address() as AddressInfo
  // Long enough for a bench run: the signatures are made before the load starts.
  const signer = Client.signer({
    key: pair.privateKey,
    keyId,
    signatureAgent: BENCH_AGENT,
    expiresIn: 1_800,
  })
  return {
    url: `http://127.0.0.1:${port}/.well-known/http-message-signatures-directory`,
    async sign(url, n) {
      const out: Array<Record<string, string>> = []
      for (let i = 0; i < n; i++) {
        const h = (await signer.sign(new Request(url))).headers
        out.push({
          signature: h.get('signature')!,
          'signature-input': h.get('signature-input')!,
          'signature-agent': h.get('signature-agent')!,
        })
      }
      return out
    },
    close: () => new Promise((resolve) => server.close(() => resolve())),
  }
}
