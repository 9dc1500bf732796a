#!/bin/bash
# a rank's command under callgrind when its PMI_RANK is in CGRANKS, else at nice 19
case " $CGRANKS " in
  *" $PMI_RANK "*) exec valgrind --tool=callgrind --callgrind-out-file=$CGOUT/cg.r$PMI_RANK.%p \
                     --dump-line=no --compress-strings=no "$@" ;;
esac
exec nice -n 19 "$@"   # the others: out of the measured ranks' way (they poll while those crawl)
