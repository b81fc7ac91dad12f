// The identity metric's labels stay bounded: configured signer names, 'none', and the declared outcomes.
import { describe, expect, it } from 'vitest'
import { countIdentity } from '../../src/identity/count-identity.ts'
import { agentIdentity } from '../../src/observability/metrics.ts'

describe('agent identity metric', () => {
  it('labels by configured signer and outcome, and never by a name it was not given', async () => {
    agentIdentity.reset()
    const names = new Set(['acme'])
    const verified = (signer: string) =>
      ({ status: 'verified', signer, keyid: 'k', agent: null, alg: 'ed25519' }) as const
    countIdentity(names, verified('acme'))
    countIdentity(names, verified('acme'))
    countIdentity(names, verified('made-up'))
    countIdentity(names, { status: 'unsigned' })
    countIdentity(names, { status: 'failed', reason: 'replayed_nonce' })
    const values = (await agentIdentity.get()).values.map((v) => [v.labels.signer, v.labels.outcome, v.value])
    expect(values).toEqual([
      ['acme', 'verified', 2],
      ['none', 'verified', 1],
      ['none', 'unsigned', 1],
      ['none', 'replayed_nonce', 1],
    ])
  })
})
