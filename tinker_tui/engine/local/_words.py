"""The word list behind `WordTokenizer`, shipped as Python so it needs no package data.

Token ids depend on the ORDER of these lists: append new words at the end of a list, never
insert or remove, or saved checkpoints stop matching the tokenizer.
"""

# Common English words, lowercase. Each becomes the token " word" (with its leading space).
LOWER_WORDS = """
the of and to a in is it you that he was for on are with as i his they be at one have this
from or had by not word but what some we can out other were all there when up use your how
said an each she which do their time if will way about many then them write would like so
these her long make thing see him two has look more day could go come did number sound no
most people my over know water than call first who may down side been now find any new work
part take get place made live where after back little only round man year came show every
good me give our under name very through just form sentence great think say help low line
differ turn cause much mean before move right boy old too same tell does set three want air
well also play small end put home read hand port large spell add even land here must big
high such follow act why ask men change went light kind off need house picture try us again
animal point mother world near build self earth father head stand own page should country
found answer school grow study still learn plant cover food sun four between state keep eye
never last let thought city tree cross farm hard start might story saw far sea draw left
late run while press close night real life few north open seem together next white children
begin got walk example ease paper group always music those both mark often letter until
mile river car feet care second book carry took science eat room friend began idea fish
mountain stop once base hear horse cut sure watch color face wood main enough plain girl
usual young ready above ever red list though feel talk bird soon body dog family direct pose
leave song measure door product black short numeral class wind question happen complete ship
area half rock order fire south problem piece told knew pass since top whole king space heard
best hour better true during hundred five remember step early hold west ground interest reach
fast verb sing listen six table travel less morning ten simple several vowel toward war lay
against pattern slow center love person money serve appear road map rain rule govern pull
cold notice voice unit power town fine certain fly fall lead cry dark machine note wait plan
figure star box noun field rest correct able pound done beauty drive stood contain front
teach week final gave green oh quick develop ocean warm free minute strong special mind
behind clear tail produce fact street inch multiply nothing course stay wheel full force blue
object decide surface deep moon island foot system busy test record boat common gold possible
plane stead dry wonder laugh thousand ago ran check game shape equate hot miss brought heat
snow tire bring yes distant fill east paint language among grand ball yet wave drop heart am
present heavy dance engine position arm wide sail material size vary settle speak weight
general ice matter circle pair include divide syllable felt perhaps pick sudden count square
reason length represent art subject region energy hunt probable bed brother egg ride cell
believe fraction forest sit race window store summer train sleep prove lone leg exercise wall
catch mount wish sky board joy winter sat written wild instrument kept glass grass cow job
edge sign visit past soft fun bright gas weather month million bear finish happy hope flower
clothe strange gone jump baby eight village meet root buy raise solve metal whether push seven
paragraph third shall held hair describe cook floor either result burn hill safe cat century
consider type law bit coast copy phrase silent tall sand soil roll temperature finger industry
value fight lie beat excite natural view sense ear else quite broke case middle kill son lake
moment scale loud spring observe child straight consonant nation dictionary milk speed method
organ pay age section dress cloud surprise quiet stone tiny climb cool design poor lot
experiment bottom key iron single stick flat twenty skin smile crease hole trade melody trip
office receive row mouth exact symbol die least trouble shout except wrote seed tone join
suggest clean break lady yard rise bad blow oil blood touch grew cent mix team wire cost lost
brown wear garden equal sent choose fell fit flow fair bank collect save control decimal gentle
woman captain practice separate difficult doctor please protect noon whose locate ring
character insect caught period indicate radio spoke atom human history effect electric expect
crop modern element hit student corner party supply bone rail imagine provide agree thus
capital chair danger fruit rich thick soldier process operate guess necessary sharp wing
create neighbor wash bat rather crowd corn compare poem string bell depend meat rub tube famous
dollar stream fear sight thin triangle planet hurry chief colony clock mine tie enter major
fresh search send yellow gun allow print dead spot desert suit current lift rose continue
block chart hat sell success company subtract event particular deal swim term opposite wife
shoe shoulder spread arrange camp invent cotton born determine quart nine truck noise level
chance gather shop stretch throw shine property column molecule select wrong gray repeat
require broad prepare salt nose plural anger claim continent oxygen sugar death pretty skill
women season solution magnet silver thank branch match suffix especially fig afraid huge
sister steel discuss forward similar guide experience score apple bought led pitch coat mass
card band rope slip win dream evening condition feed tool total basic smell valley nor double
seat arrive master track parent shore division sheet substance favor connect post spend chord
fat glad original share station dad bread charge proper bar offer segment slave duck instant
market degree populate chick dear enemy reply drink occur support speech nature range steam
motion path liquid log meant quotient teeth shell neck maybe yeah okay hello hi thanks sorry
user assistant system model response output input data text token message chat reply prompt
computer program code file function value error bug test result score reward policy step
today tomorrow yesterday monday tuesday wednesday thursday friday saturday sunday january
february march april june july august september october november december weekend hour
zero eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen thirty forty
fifty sixty seventy eighty ninety billion percent half quarter double triple single
did doing done does having being been am is are was were be become became becoming
get gets got getting make makes making made take takes taking took taken give gives giving
given go goes going went gone come comes coming see sees seeing seen know knows knowing known
think thinks thinking want wants wanted wanting use uses used using find finds finding tell
tells telling work works worked working call calls called calling try tries tried trying
ask asks asked asking need needs needed needing feel feels feeling seem seems seemed leave
leaves leaving put puts putting mean means meant keep keeps keeping let lets begin begins
began beginning show shows showed shown hear hears heard play plays played playing run runs
running move moves moved moving live lives lived living believe believes believed happen
happens happened write writes writing wrote provide provides provided sit sits sitting stand
stands standing lose loses losing lost pay pays paid meet meets meeting include includes
included continue continues continued learn learns learned learning change changes changed
lead leads leading understand understands understood watch watches watched follow follows
followed stop stops stopped create creates created speak speaks spoke spoken read reads
allow allows allowed add adds added spend spends spent grow grows grew grown open opens
opened walk walks walked win wins won offer offers offered remember remembers remembered
love loves loved consider considers considered appear appears appeared buy buys bought wait
waits waited serve serves served die dies died send sends sent expect expects expected build
builds built stay stays stayed fall falls fell fallen cut cuts reach reaches reached kill
kills killed remain remains remained suggest suggests suggested raise raises raised pass
passes passed sell sells sold require requires required report reports reported decide
decides decided pull pulls pulled
good better best bad worse worst big bigger biggest small smaller smallest new newer newest
old older oldest high higher highest low lower lowest long longer longest short shorter
shortest great greater greatest little less least large larger largest young younger
youngest early earlier earliest late later latest important different able public sure
likely free possible whole real hard easy easier easiest clear certain simple simpler
recent strong special major local social national political economic international human
personal private legal medical financial natural physical current available similar final
main common individual specific entire particular serious ready various significant
difficult beautiful wonderful terrible awful nice kind happy sad angry tired hungry thirsty
hot cold warm cool wet dry clean dirty empty full heavy light dark bright quiet loud quick
slow fast rich poor cheap expensive safe dangerous true false right wrong correct incorrect
yes no not never always sometimes usually often rarely already still yet just only also very
really quite rather too almost enough maybe perhaps probably certainly definitely actually
however therefore although though because since unless until while whereas whether either
neither both each every all any some many much more most few several none nothing something
anything everything someone anyone everyone nobody somebody anybody everybody somewhere
anywhere everywhere nowhere here there where when why how what who whom whose which that this
these those i me my mine myself you your yours yourself yourselves he him his himself she
her hers herself it its itself we us our ours ourselves they them their theirs themselves
a an the and or but if then else so than as at by for from in into of off on onto out over
to up upon with within without about above across after against along among around before
behind below beneath beside besides between beyond down during except inside near outside
past through throughout toward towards under underneath unlike via
can could may might must shall should will would ought
water fire earth air sun moon star sky cloud rain snow wind storm sea ocean river lake
mountain hill valley forest tree flower grass leaf leaves rock stone sand dust ice
dog cat bird fish horse cow pig sheep chicken mouse rabbit lion tiger bear wolf fox deer
elephant monkey snake frog bee ant spider whale shark duck goose owl eagle
apple banana orange grape lemon cherry peach pear strawberry potato tomato carrot onion
rice bread cheese butter egg eggs milk coffee tea juice wine beer soup salad sandwich pizza
cake cookie chocolate candy sugar salt pepper meat chicken beef pork fish
red orange yellow green blue purple pink brown black white gray grey gold silver
head face eye eyes ear ears nose mouth lips tooth teeth hair neck shoulder arm arms hand
hands finger fingers leg legs knee foot feet heart brain blood bone skin body
house home room kitchen bedroom bathroom door window wall floor roof garden yard street
road city town village country state world place building school office shop store market
hospital church bank library park station airport hotel restaurant
car bus train plane ship boat bike bicycle truck taxi
man woman men women boy girl child children baby person people friend family mother father
parent parents brother sister son daughter husband wife king queen teacher student doctor
nurse police worker farmer driver player writer artist scientist engineer
time year years month months week weeks day days night nights morning afternoon evening
minute minutes second seconds hour hours today moment future past history
thing things way ways life lives fact facts case cases point points group groups part parts
problem problems number numbers idea ideas story stories question questions answer answers
example examples reason reasons result results word words sentence sentences letter letters
game games team teams money price job jobs business company market
love hate fear hope joy anger peace war truth lie dream memory mind soul spirit
""".split()

# Words that also get the tokens "Word", " Word" and "word" (no space): sentence starters, the
# words of the built-in example and the role_colon renderer, and other common title-case words.
CAPITALISED_WORDS = """
yes no maybe answer question user assistant system human ai
is are am was were be do does did can could will would should shall may might must has have
had what who whom whose which when where why how
the a an i it this that these those there here he she we they you my your our their his her
its if in on at for from to of with and but or not so then now please thanks thank hello hi
sure okay ok true false let find write give tell explain name list say reply respond return
output input example note step first second third finally next also however because since
after before as all some any each every one two three four five six seven eight nine ten
monday tuesday wednesday thursday friday saturday sunday january february march april may
june july august september october november december english french german spanish chinese
america american europe london paris new york california earth mars god mr mrs ms dr
correct incorrect wrong right good bad great well yeah hey dear today tomorrow yesterday
""".split()
