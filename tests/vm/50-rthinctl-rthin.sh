# SPDX-License-Identifier: GPL-2.0
# The rthinctl message suite of 50-rthinctl-messages.sh, against rthin's own
# targets (rthin-pool/rthin) instead of the C dm-thin.
T_POOL=rthin-pool T_THIN=rthin
. /rthin/tests/50-rthinctl-messages.sh
