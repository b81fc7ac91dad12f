// The compiled contracts (built by build.ts, committed), typed for viem's deployContract.
import type { Abi, Hex } from 'viem'
import authorizationBatcherJson from './authorization-batcher.artifact.json' with { type: 'json' }
import batchSettlementJson from './batch-settlement.artifact.json' with { type: 'json' }
import erc3009DepositCollectorJson from './erc3009-deposit-collector.artifact.json' with { type: 'json' }
import permit2Json from './permit2.artifact.json' with { type: 'json' }
import testUsdcJson from './test-usdc.artifact.json' with { type: 'json' }
import uptoSettlementBatcherJson from './upto-settlement-batcher.artifact.json' with { type: 'json' }
import x402UptoPermit2ProxyJson from './x402-upto-permit2-proxy.artifact.json' with { type: 'json' }

export interface Artifact {
  contractName: string
  abi: Abi
  bytecode: Hex
}

export const testUsdcArtifact = testUsdcJson as unknown as Artifact
/** Set with anvil_setCode at the fixed addresses the x402 batch-settlement client expects. */
export interface RuntimeArtifact extends Artifact {
  deployedBytecode: Hex
}
export const batchSettlementArtifact = batchSettlementJson as unknown as RuntimeArtifact
export const erc3009DepositCollectorArtifact = erc3009DepositCollectorJson as unknown as RuntimeArtifact
export const authorizationBatcherArtifact = authorizationBatcherJson as unknown as RuntimeArtifact
/** x402 upto on the dev chain: Permit2 and the upto proxy at their canonical addresses, and tollgate's batcher. */
export const permit2Artifact = permit2Json as unknown as RuntimeArtifact
export const x402UptoPermit2ProxyArtifact = x402UptoPermit2ProxyJson as unknown as RuntimeArtifact
export const uptoSettlementBatcherArtifact = uptoSettlementBatcherJson as unknown as RuntimeArtifact
