// Test helper: throw-away ZooKeeper servers on 127.0.0.1 and four-letter words. One copy, shared
// with the bench, the chaos runners and the demo: scripts/support/zookeeper.mjs (typed by JSDoc).
export {
  fourLetter,
  modeOf as modeOfPort,
  REPO_ROOT,
  startEnsemble,
  startStandalone,
  TICK_TIME_MS,
  waitFor,
  ZK_SCRIPT,
  ZkEnsembleHandle,
  zkScript,
  ZkServerHandle,
} from '../../scripts/support/zookeeper.mjs';
export type { StartOptions, ZkMode, ZkServerInfo, ZkTlsMaterial } from '../../scripts/support/zookeeper.mjs';
