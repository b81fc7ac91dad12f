// TestSmartWallet, a test fixture: an ERC-1271 contract wallet owned by one key, to pay x402 calls with a
// contract signature (built by `npm run build:contracts`). The service never deploys it.
import type { Artifact } from '../../../src/chain/contracts/artifacts.ts'
import testSmartWalletJson from './test-smart-wallet.artifact.json' with { type: 'json' }

export const testSmartWalletArtifact = testSmartWalletJson as unknown as Artifact
