// Identity settings: off by default; configured keys become node:crypto keys at start (a wrong one fails the
// start with its name); signer names must be distinct.
import { describe, expect, it } from 'vitest'
import { loadConfig } from '../../src/config/load.ts'
import { identityFromConfig } from '../../src/identity/from-config.ts'

const ED25519_PUB = `-----BEGIN PUBLIC KEY-----
MCowBQYDK2VwAyEAJrQLj5P/89iXES9+vFgrIy29clF9CC/oPPsw3c5D0bs=
-----END PUBLIC KEY-----`

describe('identity settings', () => {
  it('are off by default: no directory, no key', () => {
    const s = identityFromConfig(loadConfig({ env: {} }).identity)
    expect(s.directories).toBeNull()
    expect(s.keys.size).toBe(0)
    expect(s.policy).toEqual({ maxLifetimeS: 86400, clockSkewS: 5, authorities: [] })
  })

  it('turns configured keys and directories into what the verifier reads', () => {
    const c = loadConfig({
      env: {},
      overrides: {
        identity: {
          directories: [{ name: 'acme', signature_agent: 'https://bot.acme.example', url: null }],
          keys: [
            { name: 'partner', keyid: 'test-key-ed25519', alg: 'ed25519', key: ED25519_PUB },
            { name: 'internal', keyid: 'test-shared-secret', alg: 'hmac-sha256', key: 'c2VjcmV0' },
          ],
        },
      },
    })
    const s = identityFromConfig(c.identity)
    expect(s.signerNames).toEqual(['acme', 'partner', 'internal'])
    expect(s.keys.get('test-key-ed25519')?.name).toBe('partner')
    expect(s.directories).not.toBeNull()
    s.directories?.stop()
  })

  it('a key that is not of its algorithm fails the start, naming it', () => {
    const c = loadConfig({
      env: {},
      overrides: {
        identity: { keys: [{ name: 'partner', keyid: 'k', alg: 'rsa-pss-sha512', key: ED25519_PUB }] },
      },
    })
    expect(() => identityFromConfig(c.identity)).toThrow(/key "partner" is not a rsa-pss-sha512 key/)
  })

  it('two signers with one name are refused by the loader', () => {
    expect(() =>
      loadConfig({
        env: {},
        overrides: {
          identity: {
            directories: [{ name: 'acme', signature_agent: 'https://a.example', url: null }],
            keys: [{ name: 'acme', keyid: 'k', alg: 'ed25519', key: ED25519_PUB }],
          },
        },
      }),
    ).toThrow(/own name/)
  })
})
