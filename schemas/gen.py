#!/usr/bin/env python3
# Bootstrap placeholder: replaced by the real generator.
import argparse, os
ap = argparse.ArgumentParser(); ap.add_argument('--schemas'); ap.add_argument('--out')
a = ap.parse_args()
os.makedirs(a.out, exist_ok=True)
open(os.path.join(a.out, 'msg_gen.h'), 'w').write('#ifndef MSG_GEN_H\n#define MSG_GEN_H\n#include "gp/codec.h"\n#endif\n')
open(os.path.join(a.out, 'msg_gen.c'), 'w').write('#include "msg_gen.h"\n')
