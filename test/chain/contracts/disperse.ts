// Disperse, a test fixture: one transaction moving a token to several recipients (built by
// `npm run build:contracts`). The service never deploys it; payouts send one transfer per wallet.
import type { Artifact } from '../../../src/chain/contracts/artifacts.ts'
import disperseJson from './disperse.artifact.json' with { type: 'json' }

export const disperseArtifact = disperseJson as unknown as Artifact
