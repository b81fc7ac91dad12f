// mppx's Web Bot Auth client, unchanged, signs requests; tollgate's verifier checks them against a directory
// served on 127.0.0.1, and claims each nonce once across two instances on one database.
import { createHash, type webcrypto } from 'node:crypto'
import { Client } from 'mppx/attestation/web-bot-auth'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { claimNonce } from '../../src/db/identity-nonces.ts'
import { createSql, type Sql } from '../../src/db/sql.ts'
import { KeyDirectories } from '../../src/identity/key-directories.ts'
import { type IdentityVerifierDeps, verifyRequest } from '../../src/identity/verify-request.ts'
import { freshDatabaseUrl, migratedDatabase } from '../helpers/database.ts'
import { type KeyDirectoryServer, startKeyDirectory } from '../helpers/key-directory.ts'
import { viewOf } from '../helpers/request-view.ts'
import { waitFor } from '../helpers/wait-for.ts'

const AGENT = 'https://bot.example'

async function agentKey(alg: 'Ed25519' | 'RSA-PSS') {
  const params =
    alg === 'Ed25519'
      ? { name: 'Ed25519' }
      : { name: 'RSA-PSS', modulusLength: 2048, publicExponent: new Uint8Array([1, 0, 1]), hash: 'SHA-512' }
  const pair = (await crypto.subtle.generateKey(params, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair
  const jwk = (await crypto.subtle.exportKey('jwk', pair.publicKey)) as Record<string, string>
  const canonical =
    jwk.kty === 'OKP'
      ? JSON.stringify({ crv: jwk.crv, kty: jwk.kty, x: jwk.x })
      : JSON.stringify({ e: jwk.e, kty: jwk.kty, n: jwk.n })
  const keyId = createHash('sha256').update(canonical).digest('base64url')
  const { alg: _a, key_ops: _k, ext: _e, ...publicJwk } = jwk
  return { privateKey: pair.privateKey, keyId, jwk: publicJwk }
}

describe('Web Bot Auth requests signed by mppx', () => {
  let directory: KeyDirectoryServer
  let ed: Awaited<ReturnType<typeof agentKey>>
  let rsa: Awaited<ReturnType<typeof agentKey>>
  let stranger: Awaited<ReturnType<typeof agentKey>>
  let db: { sql: Sql; stop(): Promise<void> }
  let secondSql: Sql | null = null
  let dirsA: KeyDirectories
  let dirsB: KeyDirectories
  const policy = { maxLifetimeS: 3600, clockSkewS: 5, authorities: [] as string[] }

  function deps(
    dirs: KeyDirectories,
    sql: Sql,
    extra: Partial<IdentityVerifierDeps> = {},
  ): IdentityVerifierDeps {
    return { directories: dirs, keys: new Map(), claimNonce: (q) => claimNonce(sql, q), policy, ...extra }
  }
  const directoryPolicy = {
    allowPrivate: true,
    fetchTimeoutMs: 2000,
    minTtlMs: 1000,
    maxTtlMs: 3_600_000,
    defaultTtlMs: 60_000,
    retryMs: 50,
    maxBytes: 65536,
  }

  beforeAll(async () => {
    ed = await agentKey('Ed25519')
    rsa = await agentKey('RSA-PSS')
    stranger = await agentKey('Ed25519')
    directory = await startKeyDirectory([ed.jwk, rsa.jwk])
    // Two instances on one database: each its own client (a server database when DATABASE_URL is set).
    const url = await freshDatabaseUrl()
    if (url) {
      db = { sql: createSql(url, { max: 2 }), stop: async () => {} }
      const { migrate } = await import('../../src/db/migrate.ts')
      await migrate(db.sql)
      secondSql = createSql(url, { max: 2 })
    } else {
      db = await migratedDatabase({ max: 1 })
    }
    const allowed = [{ name: 'acme', signatureAgent: AGENT, url: directory.url }]
    dirsA = new KeyDirectories(directoryPolicy, allowed)
    dirsB = new KeyDirectories(directoryPolicy, allowed)
  })
  afterAll(async () => {
    dirsA.stop()
    dirsB.stop()
    await secondSql?.end()
    await db.sql.end()
    await db.stop()
    await directory.close()
  })

  const sign = (key: typeof ed, init: { url?: string; created?: number; expiresIn?: number } = {}) => {
    const signer = Client.signer({
      key: key.privateKey,
      keyId: key.keyId,
      signatureAgent: AGENT,
      ...(init.expiresIn ? { expiresIn: init.expiresIn } : {}),
    })
    const context =
      init.created === undefined
        ? undefined
        : {
            created: init.created,
            nonce: Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('base64url'),
          }
    return signer.sign(new Request(init.url ?? 'https://api.tollgate.test/m/ep_1?q=1'), context)
  }

  it('an unknown directory is unverified on the request path and fetched in the background', async () => {
    const req = await sign(ed)
    const before = directory.fetches()
    const first = await verifyRequest(deps(dirsA, db.sql), viewOf(req))
    expect(first).toEqual({ status: 'failed', reason: 'directory_unavailable' })
    await waitFor(() => directory.fetches() > before, { what: 'a directory fetch' })
    await dirsB.refreshAll()
    await waitFor(
      async () => (await verifyRequest(deps(dirsA, db.sql), viewOf(await sign(ed)))).status === 'verified',
      {
        what: 'the fetched key to verify',
      },
    )
  })

  it('verifies ed25519 and rsa-pss-sha512 signatures and names the signer', async () => {
    for (const key of [ed, rsa]) {
      const result = await verifyRequest(deps(dirsA, db.sql), viewOf(await sign(key)))
      expect(result).toMatchObject({ status: 'verified', signer: 'acme', keyid: key.keyId, agent: AGENT })
    }
  })

  it('a replayed signature is refused by the other instance on the same database', async () => {
    const req = await sign(ed)
    const a = await verifyRequest(deps(dirsA, db.sql), viewOf(req))
    expect(a.status).toBe('verified')
    const b = await verifyRequest(deps(dirsB, secondSql ?? db.sql), viewOf(req))
    expect(b).toEqual({ status: 'failed', reason: 'replayed_nonce' })
  })

  it('an expired signature fails as expired', async () => {
    const req = await sign(ed, { created: Math.floor(Date.now() / 1000) - 120, expiresIn: 60 })
    expect(await verifyRequest(deps(dirsA, db.sql), viewOf(req))).toEqual({
      status: 'failed',
      reason: 'expired',
    })
  })

  it('a signature made for another host does not verify here', async () => {
    const req = await sign(ed, { url: 'https://other.example/m/ep_1' })
    expect(await verifyRequest(deps(dirsA, db.sql), viewOf(req, 'api.tollgate.test'))).toEqual({
      status: 'failed',
      reason: 'bad_signature',
    })
    // With the operator's hosts configured, a Host outside them is refused before any crypto.
    const strict = deps(dirsA, db.sql, { policy: { ...policy, authorities: ['api.tollgate.test'] } })
    expect(await verifyRequest(strict, viewOf(req))).toEqual({ status: 'failed', reason: 'wrong_authority' })
  })

  it('a key the allowed directory does not list, or a directory not allowed, is not verified', async () => {
    const unknown = await verifyRequest(deps(dirsA, db.sql), viewOf(await sign(stranger)))
    expect(unknown).toEqual({ status: 'failed', reason: 'unknown_key' })
    const signer = Client.signer({
      key: ed.privateKey,
      keyId: ed.keyId,
      signatureAgent: 'https://evil.example',
    })
    const foreign = await signer.sign(new Request('https://api.tollgate.test/m/ep_1'))
    expect(await verifyRequest(deps(dirsA, db.sql), viewOf(foreign))).toEqual({
      status: 'failed',
      reason: 'directory_not_allowed',
    })
  })

  it('a tampered signed component fails, and does not burn the nonce', async () => {
    const req = await sign(ed)
    const input = req.headers.get('signature-input')!
    const tampered = new Request(req, { headers: new Headers(req.headers) })
    tampered.headers.set(
      'signature-input',
      input.replace(/expires=(\d+)/, (_m, e) => `expires=${Number(e) + 1}`),
    )
    expect(await verifyRequest(deps(dirsA, db.sql), viewOf(tampered))).toEqual({
      status: 'failed',
      reason: 'bad_signature',
    })
    expect((await verifyRequest(deps(dirsA, db.sql), viewOf(req))).status).toBe('verified')
  })

  it('no signature headers at all is unsigned', async () => {
    const req = new Request('https://api.tollgate.test/m/ep_1')
    expect(await verifyRequest(deps(dirsA, db.sql), viewOf(req))).toEqual({ status: 'unsigned' })
  })
})
