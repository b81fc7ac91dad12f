// Key directories: Cache-Control max-age bounds the cache, private targets are refused unless allowed, and a
// look-up never waits on a fetch.
import { describe, expect, it } from 'vitest'
import { KeyDirectories, ttlFrom } from '../../src/identity/key-directories.ts'
import { startKeyDirectory } from '../helpers/key-directory.ts'
import { waitFor } from '../helpers/wait-for.ts'

const ED_JWK = { kty: 'OKP', crv: 'Ed25519', x: 'JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs' }
const policy = {
  allowPrivate: true,
  fetchTimeoutMs: 2000,
  minTtlMs: 100,
  maxTtlMs: 10_000,
  defaultTtlMs: 5_000,
  retryMs: 50,
  maxBytes: 65536,
}

describe('key directories', () => {
  it('reads Cache-Control max-age within the configured bounds', () => {
    expect(ttlFrom('public, max-age=3', policy)).toBe(3_000)
    expect(ttlFrom('max-age=999999', policy)).toBe(10_000)
    expect(ttlFrom('max-age=0', policy)).toBe(100)
    expect(ttlFrom('no-store', policy)).toBe(100)
    expect(ttlFrom(null, policy)).toBe(5_000)
  })

  it('refetches when max-age runs out, in the background', async () => {
    const dir = await startKeyDirectory([ED_JWK], 'max-age=0')
    const dirs = new KeyDirectories(policy, [
      { name: 'acme', signatureAgent: 'https://bot.example', url: dir.url },
    ])
    try {
      await dirs.refreshAll()
      const found = dirs.lookup('https://bot.example', 'poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U')
      expect(found.status).toBe('found')
      // minTtlMs 100: the timer refreshes without any request asking.
      await waitFor(() => dir.fetches() >= 3, { what: 'background refreshes' })
    } finally {
      dirs.stop()
      await dir.close()
    }
  })

  it('a directory on a private address is refused unless allowed (SSRF rules of upstreams)', async () => {
    const dir = await startKeyDirectory([ED_JWK])
    const dirs = new KeyDirectories({ ...policy, allowPrivate: false }, [
      { name: 'acme', signatureAgent: 'https://bot.example', url: dir.url },
    ])
    try {
      await dirs.refreshAll()
      expect(dir.fetches()).toBe(0)
      expect(dirs.lookup('https://bot.example', 'x').status).toBe('directory_unavailable')
    } finally {
      dirs.stop()
      await dir.close()
    }
  })
})
